#!/bin/bash
# contrib/compat-check.sh UCX_SRC_DIR... - does xqp compile against these
# UCX releases?
#
# Only the installed UCX release can be built against and tested. For any
# other release this compiles the plugin's sources (libxqp_core, the plugin
# objects and the compat unit test) against that release's source tree:
# configure runs with --enable-ucx-compile-only, so its UCX API probes run
# against the tree and the build configuration comes from the tree's
# config.h. Nothing is linked against, installed or run: a release passes
# when everything compiles (with -Werror, so a slot missing from xqp's
# operation tables fails it too).
#
# UCX_SRC_DIR is an unpacked UCX source tree of any release, e.g. from
#   git -C UCX_GIT_DIR archive --prefix=ucx-1.19.1/ v1.19.1 | tar -x
# A tree that is not configured yet is prepared first with 'autoreconf -i'
# and './configure' (no network; UCX itself is not built). This takes a few
# minutes per release.
#
# Environment:
#   XQP_COMPAT_BUILD_DIR  scratch builds go to DIR/ucx-VERSION (default: /tmp/xqp-compat-check)
#   XQP_COMPAT_CXXFLAGS   CXXFLAGS of the check (default: -O0, to be quick)
#   JOBS                  parallel compile jobs (default: 2)
#
# Exit status: 0 when every release compiles.
set -euo pipefail

SRC=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)
BUILD_ROOT=${XQP_COMPAT_BUILD_DIR:-/tmp/xqp-compat-check}
JOBS=${JOBS:-2}

log() { printf '[compat-check] %s\n' "$*" >&2; }
die() { printf 'compat-check: error: %s\n' "$*" >&2; exit 2; }

case "${1:-}" in
    ""|-h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

[ -x "$SRC/configure" ] || die "run $SRC/autogen.sh first"

# shellcheck source=contrib/ucx-tree.sh
. "$SRC/contrib/ucx-tree.sh"

# autoreconf + configure, without UCX's autogen.sh (newer ones update git
# submodules) and without building UCX
prepare_ucx() {
    local dir=$1
    [ -f "$dir/config.h" ] && [ -f "$dir/src/uct/api/version.h" ] && return 0
    log "preparing $dir (autoreconf, configure)"
    (cd "$dir" && mkdir -p config/m4 config/aux &&
         autoreconf -i > xqp-compat-autoreconf.log 2>&1 &&
         ./configure --without-cuda --without-rocm --without-java --without-go \
             > xqp-compat-configure.log 2>&1) ||
        { log "cannot configure $dir (see $dir/xqp-compat-*.log)"; return 1; }
}

check_one() {
    local ucx=$1 version build
    [ -f "$ucx/src/uct/base/uct_iface.h" ] && [ -f "$ucx/configure.ac" ] ||
        { log "$ucx is not a UCX source tree"; return 1; }
    ucx=$(cd "$ucx" && pwd)
    version=$(ucx_tree_version "$ucx")
    prepare_ucx "$ucx" || return 1
    build=$BUILD_ROOT/ucx-$version
    rm -rf "$build"
    mkdir -p "$build"
    log "UCX $version: configure (compile-only) in $build"
    if ! (cd "$build" && "$SRC/configure" --enable-ucx-compile-only --with-ucx-src="$ucx" \
              CXXFLAGS="${XQP_COMPAT_CXXFLAGS:--O0}" > configure.out 2>&1); then
        tail -n 5 "$build/configure.out" >&2
        log "UCX $version: configure failed (see $build/config.log)"
        return 1
    fi
    sed -n '/UCX API probes/,/libibverbs:/p' "$build/configure.out" | sed '$d' >&2
    local targets=(libxqp_core.la src/plugin/plugin.lo src/plugin/introspect.lo)
    if grep -q 'GoogleTest: *yes' "$build/configure.out"; then
        targets+=(test/unit/xqp_unit_tests-test_compat.o)
    fi
    log "UCX $version: compiling ${targets[*]}"
    if ! make -k -C "$build" -j"$JOBS" "${targets[@]}" > "$build/make.out" 2>&1; then
        grep -E 'error|Error' "$build/make.out" | head -n 20 >&2
        log "UCX $version: FAILED to compile (see $build/make.out)"
        return 1
    fi
    log "UCX $version: compiles"
}

passed=()
failed=()
for ucx in "$@"; do
    if check_one "$ucx"; then
        passed+=("$(ucx_tree_version "$ucx")")
    else
        failed+=("$ucx")
    fi
done
echo "compiles against UCX: ${passed[*]:-none}"
[ ${#failed[@]} = 0 ] || { echo "fails against: ${failed[*]}"; exit 1; }
