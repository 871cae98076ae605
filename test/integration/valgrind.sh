#!/bin/bash
# The integration tests that exercise most of xqp's code, under valgrind
# memcheck (run inside the testbed by 'make check-valgrind'). Fails on any
# memory error, or a definite leak, that valgrind attributes to a stack the
# suppressions (test/valgrind.supp) do not cover. Ends with "N passed, N failed".
set -u
: "${XQP_PLUGIN:?}" "${XQP_BUILDDIR:?}" "${XQP_SRCDIR:?}"
TESTS=$XQP_BUILDDIR/test/integration
DEV=${XQP_EXPECT_DEVICE:-${XQP_VM_RDMA_DEV:-rxe0}}
export XQP_EXPECT_DEVICE=$DEV XQP_TEST_DATA_DIR=$XQP_SRCDIR/test/data
# valgrind on an emulated CPU is ~50 times slower: give a connection attempt
# the time it needs there (the default suits real machines)
export UCX_XQP_CONNECT_TIMEOUT=300s XQP_TEST_TIMEOUT=300
WORK=$(mktemp -d /tmp/xqp-vg.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# --fair-sched=yes: valgrind runs one thread at a time, and without it a
# thread that busy-polls (the tests' progress loops) can keep the others,
# such as UCX's async thread that runs the connection setup, off the CPU
VG=(valgrind --fair-sched=yes --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
    --num-callers=30 --suppressions="$XQP_SRCDIR/test/valgrind.supp")
passed=0 failed=0

check() {
    local name=$1 log=$2 rc=$3
    if [ "$rc" = 0 ]; then
        echo "PASS: valgrind: $name"
        passed=$((passed + 1))
    else
        echo "FAIL: valgrind: $name (exit $rc)"
        grep -E "==[0-9]+== (Invalid|Conditional|Use of|Syscall|.*definitely lost|ERROR SUMMARY)" -A12 "$log" | head -80
        failed=$((failed + 1))
    fi
}

rc=0
LD_PRELOAD=$XQP_PLUGIN "${VG[@]}" "$TESTS/xqp_uct_tests" --gtest_brief=1 > "$WORK/uct.log" 2>&1 || rc=$?
check "component, md, iface, config (xqp_uct_tests)" "$WORK/uct.log" "$rc"

# The data path: every operation at a few sizes, plus the flush, fence,
# pending, atomics, malformed-input and destroy-while-connecting tests. Sizes
# stop at 64 KiB: valgrind's allocator maps and unmaps large blocks itself,
# unseen by UCX's memory hooks, so the registration cache would hand out
# registrations of pages that are gone (natively glibc's munmap is hooked).
# The log stays in the build directory (valgrind-datapath.log).
DP_LOG=$XQP_BUILDDIR/valgrind-datapath.log
# (not the 64-endpoint flood: a flow test of 19200 messages, minutes under valgrind)
dp_start=$SECONDS
rc=0
# (the loopback get with 16 MiB: the memory checks, not the peer deadline's allowance)
XQP_TEST_LOOPBACK_GET_MIB=16 LD_PRELOAD=$XQP_PLUGIN "${VG[@]}" "$TESTS/xqp_datapath_tests" \
    --gtest_filter='*_1B:*_8B:*_1KiB:*_64KiB:Datapath.*:Atomics.*:Pending.*-Pending.ManyEndpointsFlooding*' \
    > "$DP_LOG" 2>&1 || rc=$?
check "data path: RMA, AM, atomics, flush, pending (xqp_datapath_tests, 1 B..64 KiB)" "$DP_LOG" "$rc"
echo "valgrind: data path took $((SECONDS - dp_start)) s"

rm -f "$WORK"/a "$WORK"/b "$WORK"/*.done
LD_PRELOAD=$XQP_PLUGIN "${VG[@]}" "$TESTS/xqp_wireup_peer" --dev "$DEV:1" --addr-file "$WORK/a" \
    --expect-passive 4 --done-file "$WORK/a.done" --wait-for "$WORK/b.done" --timeout 300 \
    > "$WORK/server.log" 2>&1 &
server=$!
rc=0
LD_PRELOAD=$XQP_PLUGIN "${VG[@]}" "$TESTS/xqp_wireup_peer" --dev "$DEV:1" --addr-file "$WORK/b" \
    --connect-to "$WORK/a" --eps 4 --pending --done-file "$WORK/b.done" --wait-for "$WORK/a.done" \
    --timeout 300 > "$WORK/client.log" 2>&1 || rc=$?
check "wireup, active side (4 endpoints, pending)" "$WORK/client.log" "$rc"
rc=0
wait "$server" || rc=$?
check "wireup, passive side" "$WORK/server.log" "$rc"

echo "valgrind: $passed passed, $failed failed"
[ "$failed" = 0 ]
