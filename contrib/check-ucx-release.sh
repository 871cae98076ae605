#!/bin/bash
# contrib/check-ucx-release.sh UCX_SRC_DIR... - build, install and test xqp
# against these UCX releases, each given as an unpacked UCX source tree, e.g.
#   git -C UCX_GIT_DIR archive --prefix=ucx-1.22.0/ v1.22.0 | tar -x
#
# For each tree:
#   1. UCX itself is built (verbs, rdmacm, cma, ucx_perftest; no GPUs, no
#      bindings) from a private copy of the tree and installed into a cached
#      prefix, DIR/ucx-VERSION-KEY/prefix. KEY identifies the tree (every
#      file's path, size and mtime): an unchanged tree reuses its prefix.
#   2. xqp is configured with --prefix=PREFIX --with-ucx=PREFIX
#      --with-ucx-src=COPY, built, unit-tested ('make check') and installed
#      into PREFIX, so the plugin lands in UCX's own module directory.
#   3. The integration suite ('make check-testbed') runs in the testbed with
#      PREFIX/bin first in PATH and PREFIX/lib in LD_LIBRARY_PATH, so that
#      ucx_info, ucx_perftest and the libucp Open MPI loads are that UCX's;
#      the suite's first test checks exactly that and logs the versions.
#      Where that UCX loads plugins from its module directory by itself, the
#      suite also runs its "module directory" tests (no LD_PRELOAD, no xqp-run).
#
# Ends with one line per release: "UCX X.Y.Z: N passed, M failed".
#
# Environment:
#   XQP_UCX_RELEASE_CACHE  UCX builds (default: /var/cache/xqp-ucx-release)
#   XQP_UCX_RELEASE_BUILD  xqp builds and logs go to DIR/ucx-VERSION
#                          (default: /tmp/xqp-ucx-release)
#   XQP_UCX_RELEASE_BUILD_ONLY=1  build and install, run no test
#   XQP_SUITE_ONLY         passed on: run only the suite tests matching it
#   JOBS                   parallel make jobs (default: 2)
#
# Exit status: 0 when every test passed for every tree; 1 when a test failed;
# 2 when a build failed or the arguments are wrong.
set -euo pipefail

SRC=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)
CACHE=${XQP_UCX_RELEASE_CACHE:-/var/cache/xqp-ucx-release}
BUILD_ROOT=${XQP_UCX_RELEASE_BUILD:-/tmp/xqp-ucx-release}
JOBS=${JOBS:-2}
# Bump when the way UCX is configured or built changes.
RECIPE=1

# shellcheck source=contrib/ucx-tree.sh
. "$SRC/contrib/ucx-tree.sh"

log() { printf '[ucx-release %5ss] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'check-ucx-release: error: %s\n' "$*" >&2; exit 2; }

case "${1:-}" in
    ""|-h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[ -x "$SRC/configure" ] || die "run $SRC/autogen.sh first"

# build_ucx TREE VERSION: sets UCX_COPY and UCX_PREFIX (built and installed)
build_ucx() {
    local tree=$1 version=$2 key dir
    key=$(ucx_tree_key "$tree" "release recipe $RECIPE")
    dir=$CACHE/ucx-$version-$key
    UCX_COPY=$dir/src UCX_PREFIX=$dir/prefix
    if [ -f "$dir/.built" ]; then
        log "UCX $version: cached in $dir"
        return 0
    fi
    mkdir -p "$CACHE"
    local old
    for old in "$CACHE/ucx-$version"-*; do
        [ -e "$old" ] && [ "$old" != "$dir" ] && { log "removing stale $old"; rm -rf "$old"; }
    done
    rm -rf "$dir"
    mkdir -p "$dir"
    log "UCX $version: copying $tree to $UCX_COPY"
    cp -a "$tree" "$UCX_COPY"
    rm -rf "$UCX_COPY/.git"
    # Debian's configuration (what ucx_info -b of Debian's UCX shows), with
    # verbs, rdmacm and cma explicit, no GPUs and no bindings.
    local -a flags=(
        --prefix="$UCX_PREFIX" --disable-option-checking --disable-silent-rules
        --disable-maintainer-mode --disable-dependency-tracking
        --enable-mt --with-verbs --with-rdmacm --enable-cma
        --disable-backtrace-detail --disable-logging --enable-devel-headers
        --without-cuda --without-rocm --without-java --without-go
        --disable-doxygen-doc
    )
    (
        cd "$UCX_COPY"
        # autoreconf, not autogen.sh: newer ones update git submodules
        log "UCX $version: autoreconf (log: $dir/autoreconf.log)"
        mkdir -p config/m4 config/aux
        nice -n 19 autoreconf -i >"$dir/autoreconf.log" 2>&1 || { tail -n 30 "$dir/autoreconf.log"; exit 1; }
        log "UCX $version: configure (log: $dir/configure.log)"
        nice -n 19 ./configure "${flags[@]}" >"$dir/configure.log" 2>&1 ||
            { tail -n 30 "$dir/configure.log"; exit 1; }
        grep -q '^#define HAVE_IB 1' config.h &&
            grep -q 'UCT modules:.*< .*\<ib\>.*\<rdmacm\>' "$dir/configure.log" ||
            { echo "configure found no verbs or no rdmacm"; exit 1; }
        log "UCX $version: make -j$JOBS (log: $dir/make.log)"
        nice -n 19 make -j"$JOBS" >"$dir/make.log" 2>&1 || { tail -n 40 "$dir/make.log"; exit 1; }
        nice -n 19 make install >>"$dir/make.log" 2>&1 || { tail -n 40 "$dir/make.log"; exit 1; }
    ) || { log "UCX $version: build failed (logs in $dir)"; return 1; }
    local got
    got=$(LD_LIBRARY_PATH=$UCX_PREFIX/lib "$UCX_PREFIX/bin/ucx_info" -v | sed -n -e 's/^# *Version \([0-9.]*\).*/\1/p' -e 's/^# *Library version: *\([0-9.]*\).*/\1/p' \
             -e 's/^# *UCT version=\([0-9.]*\).*/\1/p')
    [ "$got" = "$version" ] || { log "UCX $version: the installed ucx_info reports '$got'"; return 1; }
    [ -x "$UCX_PREFIX/bin/ucx_perftest" ] || { log "UCX $version: no ucx_perftest installed"; return 1; }
    touch "$dir/.built"
    log "UCX $version: built and installed into $UCX_PREFIX"
}

# build_xqp VERSION: builds, unit-tests and installs xqp into UCX_PREFIX
build_xqp() {
    local version=$1
    XQP_BUILD=$BUILD_ROOT/ucx-$version
    rm -rf "$XQP_BUILD"
    mkdir -p "$XQP_BUILD"
    log "UCX $version: xqp configure, make, make check, make install (logs: $XQP_BUILD/*.out)"
    (
        cd "$XQP_BUILD"
        export PATH=$UCX_PREFIX/bin:$PATH
        "$SRC/configure" --prefix="$UCX_PREFIX" --with-ucx="$UCX_PREFIX" \
            --with-ucx-src="$UCX_COPY" >configure.out 2>&1 || { tail -n 20 configure.out; exit 1; }
        make -j"$JOBS" >make.out 2>&1 || { grep -E 'error' make.out | head -n 30; exit 1; }
        make -j"$JOBS" check >check.out 2>&1 ||
            { grep -E '^(FAIL|ERROR)|\[  FAILED  \]' check.out | head -n 30; exit 1; }
        make install >install.out 2>&1 || { tail -n 20 install.out; exit 1; }
    ) || { log "UCX $version: building xqp failed (see $XQP_BUILD)"; return 1; }
    [ -f "$UCX_PREFIX/lib/ucx/libuct_xqp.so.0" ] ||
        { log "UCX $version: make install put no libuct_xqp.so.0 into $UCX_PREFIX/lib/ucx"; return 1; }
}

# run_suite VERSION: the integration suite against UCX_PREFIX; sets RESULT
run_suite() {
    local version=$1 rc=0
    log "UCX $version: integration suite in the testbed (log: $XQP_BUILD/suite.out)"
    (
        cd "$XQP_BUILD"
        export PATH=$UCX_PREFIX/bin:$PATH
        export LD_LIBRARY_PATH=$UCX_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export XQP_UCX_PREFIX=$UCX_PREFIX
        unset LD_PRELOAD
        make check-testbed
    ) >"$XQP_BUILD/suite.out" 2>&1 || rc=$?
    grep -E '^(PASS|FAIL|SKIP)|^== ' "$XQP_BUILD/suite.out" >&2 || true
    # the suite's own summary, in the harness's log of it
    RESULT=$(sed -n 's/^integration: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 passed, \2 failed/p' \
                 "$XQP_BUILD/test/integration/testbed.log" 2>/dev/null | tail -n 1)
    if [ -z "$RESULT" ]; then
        tail -n 20 "$XQP_BUILD/suite.out" >&2
        RESULT="suite did not finish (status $rc)"
        return 1
    fi
    [ "$rc" = 0 ]
}

# one run at a time: a second one would remove the first one's build
mkdir -p "$BUILD_ROOT"
exec 9>"$BUILD_ROOT/.lock"
flock -n 9 || die "another check-ucx-release.sh is running (lock: $BUILD_ROOT/.lock)"

summary=() status=0
for tree in "$@"; do
    [ -f "$tree/src/uct/base/uct_iface.h" ] && [ -f "$tree/configure.ac" ] ||
        die "$tree is not a UCX source tree"
    tree=$(cd "$tree" && pwd)
    version=$(ucx_tree_version "$tree")
    if ! build_ucx "$tree" "$version"; then
        summary+=("UCX $version: UCX build failed")
        status=2
        continue
    fi
    if ! build_xqp "$version"; then
        summary+=("UCX $version: xqp build failed")
        status=2
        continue
    fi
    if [ "${XQP_UCX_RELEASE_BUILD_ONLY:-0}" = 1 ]; then
        summary+=("UCX $version: built and installed, not tested")
        continue
    fi
    RESULT=
    run_suite "$version" || { [ "$status" = 2 ] || status=1; }
    summary+=("UCX $version: $RESULT")
done
printf '%s\n' "${summary[@]}"
exit "$status"
