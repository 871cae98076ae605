#!/bin/bash
# contrib/ucx-gtest.sh UCX_SRC_DIR BUILD_DIR [GTEST_FILTER] - run UCX's own
# gtest suite against xqp (and, for comparison, rc_verbs) on rxe0 in the
# Soft-RoCE testbed.
#
#   UCX_SRC_DIR   a UCX release's source tree (.deps/ucx-1.13.1, or one made
#                 with git archive of a tag, e.g. .deps/ucx-1.22.0)
#   BUILD_DIR     xqp build tree holding .libs/libuct_xqp.so.0. When it holds
#                 no Makefile (a new or empty directory), xqp is configured
#                 there against the cached UCX build below and built; a later
#                 run with the same directory rebuilds it (make) first.
#   GTEST_FILTER  ':'-separated gtest patterns written WITHOUT the
#                 instantiation prefix, e.g. 'test_ucp_rma.get_nonblocking/*'
#                 (test_ucp* patterns are UCP tests, the others UCT tests);
#                 each pattern is reported as its own group. Default: the
#                 UCT groups rma am amo err mix flush pending ep event
#                 peer_failure and the UCP groups tag rma amo am wireup
#                 peer_failure sockaddr.
#
# UCX's gtest chooses its transports at compile time. The script copies the
# UCX tree to a cache directory (one per UCX version), adds xqp next to rc_verbs in the UCT and UCP
# instantiation lists (an edit made with sed at run time), configures UCX like
# Debian does (so that the structures match what xqp was built against) plus
# --enable-gtest, builds it and its gtest and installs it into the cache. That
# happens once: a later run reuses it while the UCX tree and the edit are the
# same. Then it boots the testbed once and, for each transport and group, runs
# the gtest with only the cache's UCX libraries (LD_LIBRARY_PATH). How xqp
# gets in depends on the xqp build (its configure's XQP_UCX_LOADS_PLUGINS):
# for a UCX that loads only its compiled-in modules (<= 1.21) the plugin is
# preloaded; for one that scans its module directory (>= 1.22) the plugin is
# copied into the cache's module directory and nothing is preloaded, as a
# drop-in plugin is used. A test that crashes or hangs is recorded and the group resumes
# after it (neither it nor the tests that already have a result run again).
# The test cases UCX instantiates for its IB transports only
# (UCT_INSTANTIATE_IB_TEST_CASE: they set UCX's IB md and iface variables)
# are left out for xqp. It prints "group: N passed, M failed" per transport
# and group.
#
# When both xqp and rc_verbs ran, contrib/ucx-gtest-compare.sh then lists
# the rc_verbs passes that xqp does not pass. The last full result and the
# known differences from rc_verbs are in the README ("UCX's own test suite").
#
# Environment:
#   XQP_UCX_GTEST_CACHE    cache directory (default: /var/cache/xqp-ucx-gtest)
#   XQP_UCX_GTEST_TLS      transports to run (default: "xqp rc_verbs")
#   XQP_UCX_GTEST_OUT      where the logs go (default: CACHE/runs/DATE)
#   XQP_UCX_GTEST_TIMEOUT  limit in seconds for one gtest process (default: 900)
#   XQP_UCX_GTEST_STALL    a gtest process that prints nothing for this many
#                          seconds hangs (default: 0, only the limit above)
#   XQP_UCX_GTEST_GDB      a gdb command file run on a hung process after
#                          every thread's backtrace (both go to
#                          TRANSPORT.GROUP.hangROUND in the log directory;
#                          default: contrib/gdb/xqp-state.gdb, which prints
#                          xqp's interfaces and endpoints; empty: none)
#   XQP_UCX_GTEST_ARGS     extra gtest arguments (e.g. --gtest_repeat=5)
#   XQP_UCX_GTEST_BUILD_ONLY=1  build (or check the cache) and stop
#   XQP_PLUGIN             plugin to load (default: BUILD_DIR/.libs/libuct_xqp.so.0)
#   JOBS                   parallel make jobs (default: 2, run under nice)
#   XQP_VM_TIMEOUT         testbed limit (default here: 7200)
#
# Exit status: 0 when every test of every transport passed, 1 when a test
# failed, crashed or timed out, 2 on usage or build errors, or the testbed's
# status (124 timeout, 125 testbed failure).
set -euo pipefail

SRC=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)
CACHE=${XQP_UCX_GTEST_CACHE:-/var/cache/xqp-ucx-gtest}
JOBS=${JOBS:-2}
TLS=${XQP_UCX_GTEST_TLS:-xqp rc_verbs}
# Bump when the way the tree is edited or configured changes.
RECIPE=2

log() { printf '[ucx-gtest %4ss] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'ucx-gtest: error: %s\n' "$*" >&2; exit 2; }

case "${1:-}" in
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: $0 UCX_SRC_DIR BUILD_DIR [GTEST_FILTER]"
UCX_SRC=$(readlink -f -- "$1")
BUILD=$(readlink -f -- "$2")
FILTER=${3:-}
[ -f "$UCX_SRC/src/uct/base/uct_iface.h" ] && [ -f "$UCX_SRC/test/gtest/uct/uct_test.h" ] ||
    die "$UCX_SRC is not a UCX source tree with its gtest"

# ---------------------------------------------------------------------------
# The UCX build (cached)
# ---------------------------------------------------------------------------

# shellcheck source=contrib/ucx-tree.sh
. "$SRC/contrib/ucx-tree.sh"
VERSION=$(ucx_tree_version "$UCX_SRC")
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "cannot read the UCX version of $UCX_SRC"
# Identity of the UCX tree: every file's path, size and mtime, plus the recipe.
tree_key() { ucx_tree_key "$UCX_SRC" "recipe $RECIPE"; }

# Add xqp wherever rc_verbs is instantiated for all transports.
#  UCT: UCT_TEST_IB_TLS (part of every "all transports" list); not the RC-only
#       lists, whose tests reach into rc_verbs' private structures.
#  UCP: the "rc" line of UCP_INSTANTIATE_TEST_CASE and of its GPU-aware
#       sibling, and test_ucp_sockaddr.cc's protocol list; instance name and UCX_TLS "xqp".
patch_tree() {
    local t=$1 f
    f=$t/test/gtest/uct/uct_test.h
    if grep -q '^ *UCT_TEST_IB_AND_GGA_TLS, *\\$' "$f" && grep -q '^ *ugni_smsg, *\\$' "$f"; then
        # UCX >= 1.22: UCT_TEST_TLS has UCS_PP_MAX_ARGS (21) entries already;
        # xqp takes the place of ugni_smsg (Cray's uGNI, never built here),
        # in the "all transports" list, outside the IB-only one
        sed -i 's/^\( *\)ugni_smsg, *\\$/\1xqp,                \\/' "$f"
    else
        sed -i 's/^\( *\)rc_verbs, *\\$/&\n\1xqp,                \\/' "$f"
    fi
    f=$t/test/gtest/ucp/ucp_test.h
    sed -i -e 's/^\( *\)UCP_INSTANTIATE_TEST_CASE_TLS(_test_case, rc, *"rc_v") *\\$/&\n\1UCP_INSTANTIATE_TEST_CASE_TLS(_test_case, xqp,    "xqp") \\/' \
           -e '/^ *UCP_INSTANTIATE_TEST_CASE_TLS_GPU_AWARE(_test_case, rc, *\\$/{n;s/^\( *\)"rc_v") *\\$/&\n    UCP_INSTANTIATE_TEST_CASE_TLS_GPU_AWARE(_test_case, xqp, \\\n\1"xqp") \\/}' \
           "$f"
    f=$t/test/gtest/ucp/test_ucp_sockaddr.cc
    sed -i 's/^\( *\)UCP_INSTANTIATE_TEST_CASE_TLS_GPU_AWARE(_test_case, rc, *"rc_v") *\\$/&\n\1UCP_INSTANTIATE_TEST_CASE_TLS_GPU_AWARE(_test_case, xqp, "xqp") \\/' "$f"
    # each edit must have landed exactly once
    local n
    n=$(grep -c '^ *xqp, *\\$' "$t/test/gtest/uct/uct_test.h") || true
    [ "$n" = 1 ] || die "could not add xqp to UCT's transport lists (uct_test.h changed?)"
    n=$(grep -c '_test_case, xqp,' "$t/test/gtest/ucp/ucp_test.h") || true
    [ "$n" = 2 ] || die "could not add xqp to the UCP instantiation macros (ucp_test.h changed?)"
    n=$(grep -c '_test_case, xqp,' "$t/test/gtest/ucp/test_ucp_sockaddr.cc") || true
    [ "$n" = 1 ] || die "could not add xqp to test_ucp_sockaddr.cc's protocol instantiation list"
}

build_ucx() {
    local key tree prefix
    key=$(tree_key)
    tree=$CACHE/ucx-$VERSION-$key
    prefix=$tree/_install
    UCX_TREE=$tree UCX_PREFIX=$prefix
    if [ -f "$tree/.xqp-gtest-built" ]; then
        log "UCX and its gtest: cached in $tree"
        return 0
    fi
    mkdir -p "$CACHE"
    local old
    for old in "$CACHE/ucx-$VERSION"-*; do
        [ -e "$old" ] && [ "$old" != "$tree" ] && { log "removing stale $old"; rm -rf "$old"; }
    done
    if [ ! -f "$tree/.xqp-gtest-configured" ]; then
        log "copying $UCX_SRC to $tree"
        rm -rf "$tree"
        cp -a "$UCX_SRC" "$tree"
        rm -rf "$tree/.git"
        patch_tree "$tree"
    fi
    # Debian's configuration (ucx_info -b of the installed UCX; xqp's build
    # regenerates UCX's config.h from it), with rdmacm explicit, no GPUs and
    # no bindings, plus the gtest. Installed into the cache, not /usr.
    local -a flags=(
        --prefix="$prefix" --disable-option-checking --disable-silent-rules
        --disable-maintainer-mode --disable-dependency-tracking
        --enable-mt --with-verbs --with-rdmacm --disable-backtrace-detail
        --disable-logging --enable-devel-headers --enable-cma
        --without-cuda --without-rocm --without-java --without-go
        --disable-doxygen-doc --enable-gtest
    )
    (
        cd "$tree"
        [ -f .xqp-gtest-configured ] && exit 0
        # autoreconf, not autogen.sh: newer ones update git submodules
        log "autoreconf"
        mkdir -p config/m4 config/aux
        nice -n 19 autoreconf -i >"$tree/.xqp-autogen.log" 2>&1 || { tail -n 30 "$tree/.xqp-autogen.log"; exit 1; }
        log "configure (log: $tree/.xqp-configure.log)"
        nice -n 19 ./configure "${flags[@]}" >"$tree/.xqp-configure.log" 2>&1 ||
            { tail -n 30 "$tree/.xqp-configure.log"; exit 1; }
        grep -q '^#define HAVE_IB 1' config.h &&
            grep -q 'UCT modules:.*< .*\<ib\>.*\<rdmacm\>' "$tree/.xqp-configure.log" ||
            { echo "configure found no verbs/rdmacm"; exit 1; }
        touch .xqp-gtest-configured
    ) || die "configuring UCX in $tree failed"
    (
        cd "$tree"
        # The gtest does not build with GCC 12's -Werror (use-after-free
        # false positives): its C++ warnings are not errors here. Not with
        # CXXFLAGS: configure drops it (compiler.m4 restores CXXFLAGS from
        # CFLAGS), and on make's command line it would replace
        # src/tools/perf/lib's "CXXFLAGS += -nostdlib $(PERF_LIB_CXXFLAGS)"
        # (ucx_perftest then fails to link: undefined __gxx_personality_v0).
        # GTEST_CXXFLAGS is used by the gtest and its googletest only.
        local gtest_cxxflags
        gtest_cxxflags=$(sed -n 's/^GTEST_CXXFLAGS *= *//p' test/gtest/Makefile)
        log "make -j$JOBS (log: $tree/.xqp-make.log; UCX and its gtest take ~30 min)"
        # (a failed build starts again from a fresh copy next time)
        nice -n 19 make -j"$JOBS" GTEST_CXXFLAGS="$gtest_cxxflags -Wno-error" >"$tree/.xqp-make.log" 2>&1 ||
            { tail -n 40 "$tree/.xqp-make.log"; rm -f .xqp-gtest-configured; exit 1; }
        nice -n 19 make install GTEST_CXXFLAGS="$gtest_cxxflags -Wno-error" >>"$tree/.xqp-make.log" 2>&1 || { tail -n 40 "$tree/.xqp-make.log"; exit 1; }
        [ -x test/gtest/.libs/gtest ] || [ -x test/gtest/gtest ] || { echo "no gtest binary"; exit 1; }
    ) || die "building UCX in $tree failed"
    touch "$tree/.xqp-gtest-built"
    log "built UCX and its gtest in $tree"
}

# The xqp build: BUILD as given, or configured here against the cached UCX.
build_xqp() {
    if [ ! -f "$BUILD/Makefile" ]; then
        mkdir -p "$BUILD"
        log "configuring xqp in $BUILD against $UCX_PREFIX"
        [ -x "$SRC/configure" ] || die "run $SRC/autogen.sh first"
        (cd "$BUILD" && PATH=$UCX_PREFIX/bin:$PATH "$SRC/configure" --prefix="$UCX_PREFIX" --with-ucx="$UCX_PREFIX" \
             --with-ucx-src="$UCX_TREE" >configure.out 2>&1) ||
            { tail -n 20 "$BUILD/configure.out" >&2; die "configuring xqp in $BUILD failed"; }
        touch "$BUILD/.xqp-gtest-build"
    fi
    if [ -f "$BUILD/.xqp-gtest-build" ]; then
        log "make -j$JOBS in $BUILD"
        nice -n 19 make -C "$BUILD" -j"$JOBS" >"$BUILD/make.out" 2>&1 ||
            { grep -E 'error' "$BUILD/make.out" | head -n 30 >&2; die "building xqp in $BUILD failed"; }
    fi
    PLUGIN=${XQP_PLUGIN:-$BUILD/.libs/libuct_xqp.so.0}
    [ -r "$PLUGIN" ] || die "no plugin at $PLUGIN (build xqp first, or set XQP_PLUGIN)"
    PLUGIN=$(readlink -f -- "$PLUGIN")
    local built_for loads
    built_for=$(sed -n 's/^XQP_UCX_VERSION = //p' "$BUILD/Makefile" 2>/dev/null) || true
    loads=$(sed -n 's/^XQP_UCX_LOADS_PLUGINS = //p' "$BUILD/Makefile" 2>/dev/null) || true
    [ -z "$built_for" ] || [ "$built_for" = "$VERSION" ] ||
        die "$BUILD is built for UCX $built_for, the tree is UCX $VERSION"
    if [ "$loads" = yes ]; then
        # a drop-in plugin: into the module directory, nothing preloaded
        install -m 0755 "$PLUGIN" "$UCX_PREFIX/lib/ucx/libuct_xqp.so.0"
        LOAD=module
        log "xqp: $PLUGIN, installed in $UCX_PREFIX/lib/ucx (UCX $VERSION loads it)"
    else
        rm -f "$UCX_PREFIX/lib/ucx/libuct_xqp.so.0"
        LOAD=preload
        log "xqp: $PLUGIN, preloaded"
    fi
}

build_ucx
build_xqp
[ "${XQP_UCX_GTEST_BUILD_ONLY:-0}" = 1 ] && exit 0

# ---------------------------------------------------------------------------
# The run (one testbed boot)
# ---------------------------------------------------------------------------

OUT=${XQP_UCX_GTEST_OUT:-$CACHE/runs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(readlink -f -- "$OUT")

# groups: "name pattern" lines; patterns are without the instantiation prefix
GROUPS_FILE=$OUT/groups
if [ -n "$FILTER" ]; then
    # the group's name (also a file name) is the pattern without / and *
    tr ':' '\n' <<<"$FILTER" | awk 'NF { n = $1; gsub(/[^A-Za-z0-9._-]+/, "_", n); print n, $1 }' >"$GROUPS_FILE"
else
    cat >"$GROUPS_FILE" <<'EOF'
uct-rma uct_p2p_rma_test*
uct-am uct_p2p_am_*
uct-amo uct_amo_*
uct-err uct_p2p_err_test*
uct-mix uct_p2p_mix_test*
uct-flush uct_flush_test*
uct-pending test_uct_pending*
uct-ep test_uct_ep*
uct-event test_uct_event*:uct_p2p_test_event*
uct-peer_failure test_uct_peer_failure*
ucp-tag test_ucp_tag*
ucp-rma test_ucp_rma*
ucp-amo test_ucp_atomic*
ucp-am test_ucp_am.*:test_ucp_am_*
ucp-wireup test_ucp_wireup*
ucp-peer_failure test_ucp_peer_failure*
ucp-sockaddr test_ucp_sockaddr*
EOF
fi

GTEST_BIN=$UCX_TREE/test/gtest/.libs/gtest
[ -x "$GTEST_BIN" ] || GTEST_BIN=$UCX_TREE/test/gtest/gtest

# The guest side: plain bash with builtins only where it loops (fork+exec is
# slow under TCG). For every transport and group, run the gtest; when it dies
# or hangs in a test, record that test and run the rest of the group again.
cat >"$OUT/guest.sh" <<'EOF'
#!/bin/bash
set -u
ulimit -n 1024
cd "$G_OUT"
# The gtest links libuct_ib.so.0 itself (DT_NEEDED; its RUNPATH names the
# build tree's src/uct/ib/.libs) and references uct_ib_component, so that
# structure is copy-relocated into the executable. UCX's module loader then
# dlopen()s UCX_MODULE_DIR/libuct_ib.so.0: were that another file than the
# one already loaded, it would be loaded a second time, and its constructor
# would register the same uct_ib_component again: ucs_list_add_tail() of a
# node already in uct_components_list unlinks every component registered
# after the first ib registration, i.e. xqp (preloaded), which then is "not
# available". With lib/ucx in LD_LIBRARY_PATH the DT_NEEDED resolves to the
# very file the module loader opens, and libuct_ib is loaded once.
export LD_LIBRARY_PATH=$G_PREFIX/lib:$G_PREFIX/lib/ucx
export UCX_MODULE_DIR=$G_PREFIX/lib/ucx
export UCX_HANDLE_ERRORS=bt UCX_LOG_LEVEL=warn UCX_LOG_PRINT_ENABLE=y
export UCX_UD_VERBS_ETH_DGID_CHECK=n
[ "$G_LOAD" = preload ] && export LD_PRELOAD=$G_PLUGIN
read -r -a gargs <<<"${G_ARGS:-}"

# run_gtest DUMP ARGS...: the gtest, its output appended to cur.log. A
# process that runs past G_TIMEOUT, or prints nothing for G_STALL seconds
# (0: no such limit), hangs: gdb writes every thread's backtrace (bt full)
# and, with G_GDB, that file's commands into DUMP, then it is killed and the
# status is 124. Otherwise the gtest's own status.
run_gtest() {
    local dump=$1 pid rc=0 start=$SECONDS size last=-1 still=$SECONDS gdb_limit=300
    shift
    "$G_GTEST" "$@" >>"$G_OUT/cur.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 5
        size=$(stat -c %s "$G_OUT/cur.log" 2>/dev/null) || size=0
        [ "$size" != "$last" ] && { last=$size still=$SECONDS; }
        if [ $((SECONDS - start)) -ge "$G_TIMEOUT" ] ||
           { [ "${G_STALL:-0}" -gt 0 ] && [ $((SECONDS - still)) -ge "$G_STALL" ]; }; then
            printf 'xqp: hang: %s s in all, %s s without output; gdb dump in %s\n' \
                $((SECONDS - start)) $((SECONDS - still)) "${dump##*/}" >>"$G_OUT/cur.log"
            # the command file may wait for a progress call of an xqp
            # interface: a process that never makes one is itself a finding
            timeout -k 10 "$gdb_limit" gdb -p "$pid" -batch -nx -ex 'set pagination off' \
                -ex 'thread apply all bt full' ${G_GDB:+-x "$G_GDB"} >"$dump" 2>&1 </dev/null
            [ $? -ne 124 ] ||
                printf '\nxqp: gdb stopped after %s s%s\n' "$gdb_limit" \
                    "${G_GDB:+ (waiting in ${G_GDB##*/}: no xqp interface was progressed meanwhile?)}" >>"$dump"
            kill -9 "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            return 124
        fi
    done
    wait "$pid" || rc=$?
    return "$rc"
}

for tl in $G_TLS; do
    case $tl in
        rc_verbs) uct=rc_verbs ucp=rc ;;
        *) uct=$tl ucp=$tl ;;
    esac
    while read -r group patterns; do
        filter="" skip=""
        # test cases UCX instantiates for its own IB transports only: they
        # configure UCX's IB memory domain and interface (IB_TX_INLINE_RESP,
        # REG_METHODS, ...), which xqp is not. xqp is added to the IB list
        # to get every "all transports" case; these are left out for it.
        if [ "$tl" != rc_verbs ]; then
            for c in ${G_IB_ONLY:-}; do
                skip+="${skip:+:}$uct/$c.*"
            done
        fi
        IFS=: read -r -a pats <<<"$patterns"
        for p in "${pats[@]}"; do
            case $p in
                test_ucp*) filter+="${filter:+:}$ucp/$p" ;;
                *) filter+="${filter:+:}$uct/$p" ;;
            esac
        done
        log=$G_OUT/$tl.$group.log res=$G_OUT/$tl.$group.res
        : >"$log"
        : >"$res"
        round=0
        while :; do
            round=$((round + 1))
            printf '==== %s %s round %d filter %s%s\n' "$tl" "$group" "$round" "$filter" "${skip:+-$skip}" >>"$log"
            rc=0
            run_gtest "$G_OUT/$tl.$group.hang$round" --gtest_filter="$filter${skip:+-$skip}" \
                --gtest_color=no "${gargs[@]}" || rc=$?
            # results of this round: OK/FAILED lines; the test that was
            # running when the process ended without its summary
            # UCX's own skips (UCS_TEST_SKIP_R and the like) print a
            # "[     SKIP ]" line and then end as gtest's OK: a skip, not a pass
            running="" done_ok=0 finished="" skipped=0
            while IFS= read -r line; do
                printf '%s\n' "$line" >>"$log"
                case $line in
                    "[ RUN      ] "*)
                        # the name without its " <resource>" (not a filter)
                        running=${line#"[ RUN      ] "}; running=${running%% <*}; skipped=0 ;;
                    "[     SKIP ]"*) skipped=1 ;;
                    "[       OK ] "*) t=${line#"[       OK ] "}; st=PASS
                        [ "$skipped" = 1 ] && st=SKIP
                        printf '%s %s\n' "$st" "${t%% (*}" >>"$res"
                        finished+="${finished:+:}$running"; running="" skipped=0 ;;
                    "[  FAILED  ] "*" ms)")
                        t=${line#"[  FAILED  ] "}; t=${t%% (*}; printf 'FAIL %s\n' "${t%%, where*}" >>"$res"
                        finished+="${finished:+:}$running"; running="" ;;
                    "[  SKIPPED ] "*" ms)") t=${line#"[  SKIPPED ] "}; printf 'SKIP %s\n' "${t%% (*}" >>"$res"
                        finished+="${finished:+:}$running"; running="" ;;
                    "[==========] "*" ran."*) done_ok=1 ;;
                esac
            done <"$G_OUT/cur.log"
            rm -f "$G_OUT/cur.log"
            if [ -n "$running" ]; then
                if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
                    printf 'HANG %s\n' "$running" >>"$res"
                else
                    printf 'CRASH %s (exit %s)\n' "$running" "$rc" >>"$res"
                fi
                # the next round resumes after it: neither it nor the tests
                # that already have a result run again
                skip+="${skip:+:}$running${finished:+:$finished}"
                continue
            fi
            [ "$done_ok" = 1 ] || printf 'ERROR %s round %d: gtest exit %s without results\n' "$group" "$round" "$rc" >>"$res"
            break
        done
        printf 'done %s %s\n' "$tl" "$group"
    done <"$G_GROUPS"
done
EOF
chmod +x "$OUT/guest.sh"

GDB_FILE=${XQP_UCX_GTEST_GDB-$SRC/contrib/gdb/xqp-state.gdb}
[ -z "$GDB_FILE" ] || GDB_FILE=$(readlink -f -- "$GDB_FILE")

log "running in the testbed (logs: $OUT)"
vm_rc=0
(
    cd "$OUT"
    G_IB_ONLY=$(grep -rhoE 'UCT_INSTANTIATE_IB_TEST_CASE\([A-Za-z0-9_]+\)' "$UCX_TREE/test/gtest/uct" |
                    sed -E 's/.*\((.*)\)/\1/' | sort -u | tr '\n' ' ')
    echo "$G_IB_ONLY" >"$OUT/ib-only" # for ucx-gtest-compare.sh
    export G_IB_ONLY
    export G_OUT=$OUT G_PREFIX=$UCX_PREFIX G_PLUGIN=$PLUGIN G_LOAD=$LOAD G_TLS=$TLS G_GROUPS=$GROUPS_FILE \
           G_GTEST=$GTEST_BIN G_TIMEOUT=${XQP_UCX_GTEST_TIMEOUT:-900} G_ARGS=${XQP_UCX_GTEST_ARGS:-} \
           G_STALL=${XQP_UCX_GTEST_STALL:-0} G_GDB=$GDB_FILE
    export XQP_VM_TIMEOUT=${XQP_VM_TIMEOUT:-7200}
    unset LD_PRELOAD LD_LIBRARY_PATH
    "$SRC/contrib/testbed/xqp-vm" "$OUT/guest.sh"
) || vm_rc=$?

# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------

bad=0
{
    for tl in $TLS; do
        echo "== $tl"
        while read -r group _; do
            res=$OUT/$tl.$group.res
            if [ ! -f "$res" ]; then
                echo "$group: not run"
                bad=1
                continue
            fi
            awk -v g="$group" '
                $1 == "PASS" { p++ } $1 == "SKIP" { s++ }
                $1 == "FAIL" || $1 == "CRASH" || $1 == "HANG" || $1 == "ERROR" { f++; l[f] = $0 }
                END {
                    printf "%s: %d passed, %d failed%s\n", g, p, f, s ? ", " s " skipped" : ""
                    for (i = 1; i <= f; i++) print "    " l[i]
                }' "$res"
            # (an if, not "&&": a clean last group must not end the brace
            # group, and with pipefail and -e the script, with status 1)
            if grep -qE '^(FAIL|CRASH|HANG|ERROR) ' "$res"; then
                bad=1
            fi
        done <"$GROUPS_FILE"
    done
} | tee "$OUT/summary.txt"
if grep -qE '^    (FAIL|CRASH|HANG|ERROR) |: not run' "$OUT/summary.txt"; then
    bad=1
fi
if [[ " $TLS " == *" rc_verbs "* ]] && [[ " $TLS " == *" xqp "* ]]; then
    echo "== rc_verbs passes that xqp does not pass"
    "$SRC/contrib/ucx-gtest-compare.sh" "$OUT" | tee "$OUT/compare.txt" || bad=1
fi
log "summary: $OUT/summary.txt"
[ "$vm_rc" = 0 ] || { log "testbed exit status $vm_rc"; exit "$vm_rc"; }
exit "$bad"
