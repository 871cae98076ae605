#!/bin/bash
# xqp integration suite. Runs against an installed (staged) xqp on a machine
# with an RDMA device: inside contrib/testbed/xqp-vm (rxe0), or on real
# hardware. Started by 'make check-testbed', which sets:
#   XQP_BINDIR    where xqp-run / xqp-topo are installed
#   XQP_PLUGIN    the installed libuct_xqp.so.0
#   XQP_BUILDDIR  the build tree (test programs)
#   XQP_UCX_VERSION  the UCX release xqp was built for
# XQP_EXPECT_DEVICE names the RDMA device that must carry xqp (default: the
# testbed's XQP_VM_RDMA_DEV, else the first device ibv_devices lists).
# Prints one PASS/FAIL/SKIP line per test and ends with "N passed, N failed".
set -u
: "${XQP_BINDIR:?}" "${XQP_PLUGIN:?}" "${XQP_BUILDDIR:?}" "${XQP_SRCDIR:?}" "${XQP_UCX_VERSION:?}"

RUN=$XQP_BINDIR/xqp-run
TESTS=$XQP_BUILDDIR/test/integration
DEV=${XQP_EXPECT_DEVICE:-${XQP_VM_RDMA_DEV:-}}
if [ -z "$DEV" ]; then
    DEV=$(ibv_devices 2>/dev/null | awk 'NR > 2 { print $1; exit }')
fi
export XQP_EXPECT_DEVICE=$DEV
# loopback for out-of-band sockets; the guest's own address for RDMA
OOB_HOST=127.0.0.1

WORK=$(mktemp -d /tmp/xqp-suite.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0 skipped=0

run_test() {
    local name=$1
    shift
    local rc=0
    "$@" >"$WORK/log" 2>&1 || rc=$?
    if [ "$rc" = 0 ]; then
        echo "PASS: $name"
        passed=$((passed + 1))
    elif [ "$rc" = 77 ]; then
        echo "SKIP: $name ($(tail -n 1 "$WORK/log"))"
        skipped=$((skipped + 1))
    else
        echo "FAIL: $name (exit $rc)"
        sed 's/^/    | /' "$WORK/log" | tail -n 60
        failed=$((failed + 1))
    fi
}

need_device() {
    if [ -z "$DEV" ]; then
        echo "no RDMA device"
        exit 77
    fi
}

# "component md tl device" for every transport resource in ucx_info -d
resources() {
    awk '/^# Memory domain:/ { md = $4 }
         /^#     Component:/ { comp = $3 }
         /^#      Transport:/ { tl = $3 }
         /^#         Device:/ { print comp, md, tl, $3 }'
}

test_ucx_info_lists_xqp() (
    need_device
    "$RUN" ucx_info -d > "$WORK/d.txt" || exit 1
    resources < "$WORK/d.txt" > "$WORK/r.txt"
    cat "$WORK/r.txt"
    grep -qx "xqp $DEV xqp $DEV:1" "$WORK/r.txt" || {
        echo "expected: component xqp, memory domain $DEV, transport xqp on $DEV:1"
        exit 1
    }
    # every xqp resource sits on an RDMA device's port
    ! awk '$1 == "xqp" && $4 !~ /:[0-9]+$/' "$WORK/r.txt" | grep -q .
)

test_ucx_info_without_plugin_has_no_xqp() (
    ucx_info -d > "$WORK/d.txt" || exit 1
    ! resources < "$WORK/d.txt" | grep -q '^xqp '
)

test_ucx_info_config_lists_variables() (
    "$RUN" ucx_info -c > "$WORK/c.txt" || exit 1
    grep '^UCX_XQP_' "$WORK/c.txt"
    for var in UCX_XQP_MAX_NUM_EPS UCX_XQP_ALLOC UCX_XQP_FAILURE; do
        grep -q "^$var=" "$WORK/c.txt" || { echo "missing $var"; exit 1; }
    done
)

test_uct_api() (
    XQP_TEST_DATA_DIR=$XQP_SRCDIR/test/data "$RUN" "$TESTS/xqp_uct_tests" --gtest_brief=1
)

test_dlopen_installed_plugin() (
    "$TESTS/xqp_dlopen_test" "$XQP_PLUGIN"
)

test_version_guard() (
    fake=$TESTS/.libs/libxqp_fake_ucx_version.so
    [ -e "$fake" ] || { echo "missing $fake"; exit 1; }
    rc=0
    LD_PRELOAD="$fake $XQP_PLUGIN" ucx_info -d > "$WORK/out.txt" 2> "$WORK/err.txt" || rc=$?
    cat "$WORK/err.txt"
    [ "$rc" = 0 ] || { echo "ucx_info exited $rc"; exit 1; }
    want="xqp: plugin built for UCX $XQP_UCX_VERSION but the running UCX is 1.12.0; transport xqp is disabled (rebuild xqp against UCX 1.12.0)"
    [ "$(wc -l < "$WORK/err.txt")" = 1 ] || { echo "expected exactly one line on stderr"; exit 1; }
    [ "$(cat "$WORK/err.txt")" = "$want" ] || { echo "expected: $want"; exit 1; }
    if resources < "$WORK/out.txt" | grep -q '^xqp '; then
        echo "xqp registered despite the mismatch"
        exit 1
    fi
    # and the rest of UCX still works
    resources < "$WORK/out.txt" | grep -q '^self '
)

test_ucp_unaffected_by_plugin() (
    need_device
    port=$((20000 + RANDOM % 10000))
    timeout 120 "$RUN" ucx_perftest -p "$port" > "$WORK/server.txt" 2>&1 &
    server=$!
    sleep 3
    rc=0
    timeout 120 "$RUN" ucx_perftest "$OOB_HOST" -p "$port" -t tag_lat -n 200 -s 8 || rc=$?
    wait "$server" || rc=$?
    cat "$WORK/server.txt"
    exit "$rc"
)

test_xqp_topo_falls_back_for_rxe() (
    need_device
    "$XQP_BINDIR/xqp-topo" > "$WORK/topo.txt" || exit 1
    cat "$WORK/topo.txt"
    line=$(grep "^$DEV " "$WORK/topo.txt") || { echo "$DEV not listed"; exit 1; }
    if [ -e "/sys/class/infiniband/$DEV/device" ]; then
        echo "$line" | grep -q ' pci=[0-9a-f]'
    else
        echo "$line" | grep -q ' pci=none .* fallback="no pci parent"$'
    fi
)

test_xqp_topo_xml_places_rxe0() (
    xml=$XQP_SRCDIR/test/data/topologies/xqp_synthetic-rxe0-on-pci.xml
    out=$("$XQP_BINDIR/xqp-topo" --xml "$xml") || exit 1
    echo "$out"
    [ "$out" = "rxe0 pci=0000:81:00.0 numa=1 cpus=2-3" ]
)

test_xqp_topo_bad_xml_is_an_error() (
    rc=0
    "$XQP_BINDIR/xqp-topo" --xml /nonexistent.xml 2> "$WORK/err.txt" || rc=$?
    cat "$WORK/err.txt"
    [ "$rc" = 1 ] && grep -q "/nonexistent.xml" "$WORK/err.txt"
)

echo "xqp integration suite: device '${DEV:-none}', plugin $XQP_PLUGIN"
run_test "ucx_info -d lists transport xqp on $DEV:1" test_ucx_info_lists_xqp
run_test "ucx_info -d without the plugin lists no xqp" test_ucx_info_without_plugin_has_no_xqp
run_test "ucx_info -c lists the UCX_XQP_* variables" test_ucx_info_config_lists_variables
run_test "public UCT API opens component, md, iface (gtest)" test_uct_api
run_test "dlopen of the installed plugin" test_dlopen_installed_plugin
run_test "version guard disables the plugin on another UCX" test_version_guard
run_test "UCP tag_lat still works with the plugin loaded" test_ucp_unaffected_by_plugin
run_test "xqp-topo reports $DEV's locality" test_xqp_topo_falls_back_for_rxe
run_test "xqp-topo --xml places rxe0 on its PCI function" test_xqp_topo_xml_places_rxe0
run_test "xqp-topo --xml with a missing file fails naming it" test_xqp_topo_bad_xml_is_an_error

echo "integration: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
