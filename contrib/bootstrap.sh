#!/bin/bash
# contrib/bootstrap.sh [ACTION] - set up, build and test xqp on Debian 12.
#
# Installs every build and test dependency from Debian packages, fetches the
# source of the installed UCX release (UCX installs no internal headers, and
# xqp builds against them), configures and builds. Idempotent: a repeat run
# only rebuilds what changed.
#
# ACTION (default: build)
#   build   dependencies + configure + make
#   demo    build, then show transport xqp in ucx_info -d and run a
#           ucx_perftest latency and bandwidth test over it: on this
#           machine's RDMA device, or inside the Soft-RoCE testbed VM
#   check   build, then the whole test suite: unit tests on the host
#           ('make check'), the integration suite in one testbed boot
#           ('make check-testbed'), the cross-host tests in one boot of two
#           guests ('make check-testbed-hosts'), valgrind, the sanitizers, the packages
#           and 'make distcheck'; it ends with each step's time. CI runs
#           this. It runs the same on a fresh machine as on one with
#           caches: the benchmarks ('make bench') and other UCX releases
#           ('contrib/ci-ucx-releases.sh') are on demand
#
# Environment:
#   XQP_BUILD_DIR   build directory (default: <source>/build)
#   XQP_DEPS_DIR    where the UCX source goes (default: <source>/.deps)
#   XQP_NO_APT=1    do not install packages
#   XQP_CONFIGURE_FLAGS  extra flags for configure
set -euo pipefail

SRC=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)
BUILD=${XQP_BUILD_DIR:-$SRC/build}
DEPS=${XQP_DEPS_DIR:-$SRC/.deps}
ACTION=${1:-build}
JOBS=$(nproc 2>/dev/null || echo 2)

log() { printf '[bootstrap %4ss] %s\n' "$SECONDS" "$*" >&2; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

case "$ACTION" in
    build|demo|check) ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown action '$ACTION' (build, demo or check)" ;;
esac

PACKAGES=(
    build-essential autoconf automake libtool pkg-config
    libucx-dev ucx-utils libibverbs-dev librdmacm-dev ibverbs-providers
    libhwloc-dev libgtest-dev
    rdmacm-utils ibverbs-utils
    openmpi-bin libopenmpi-dev
    clang libclang-rt-14-dev valgrind
    debhelper lintian gnuplot-nox rpm
    dpkg-dev xz-utils
)

install_packages() {
    [ "${XQP_NO_APT:-0}" = 1 ] && return 0
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} = 0 ] && return 0
    [ "$(id -u)" = 0 ] || die "missing packages (${missing[*]}); run as root or install them"
    log "apt-get install ${missing[*]}"
    apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
}

# The source of exactly the installed UCX release, in $DEPS/ucx-<version>.
fetch_ucx_source() {
    local version dir
    version=$(pkg-config --modversion ucx) || die "pkg-config does not know ucx (libucx-dev)"
    dir=$DEPS/ucx-$version
    if [ -f "$dir/src/uct/base/uct_iface.h" ]; then
        UCX_SRC=$dir
        return 0
    fi
    mkdir -p "$DEPS"
    if ! apt-get source --print-uris -q ucx >/dev/null 2>&1; then
        [ "$(id -u)" = 0 ] || die "no deb-src line for ucx; add one or run as root"
        add_deb_src
    fi
    log "apt-get source ucx (UCX $version)"
    local tmp
    tmp=$(mktemp -d "$DEPS/src.XXXXXX")
    (cd "$tmp" && apt-get source -q ucx >/dev/null 2>&1) || die "apt-get source ucx failed"
    local got
    got=$(find "$tmp" -maxdepth 1 -type d -name 'ucx-*' | head -n 1)
    [ -n "$got" ] && [ -f "$got/src/uct/base/uct_iface.h" ] || die "apt-get source ucx gave no UCX tree"
    local got_version
    got_version=$(for v in major minor patch; do
                      grep "^define(\[ucx_ver_$v\]" "$got/configure.ac" | head -n 1 |
                          cut -d, -f2 | cut -d')' -f1 | tr -d ' '
                  done | paste -sd.)
    [ "$got_version" = "$version" ] ||
        die "Debian's ucx source is $got_version but the installed UCX is $version (update libucx-dev)"
    rm -rf "$dir"
    mv "$got" "$dir"
    rm -rf "$tmp"
    UCX_SRC=$dir
}

# Debian 12 ships without deb-src entries; add them next to the deb ones.
add_deb_src() {
    local f=/etc/apt/sources.list.d/xqp-deb-src.sources
    [ -f "$f" ] && { apt-get -q update >/dev/null; return 0; }
    log "adding deb-src entries ($f)"
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        awk 'BEGIN { RS = ""; ORS = "\n\n" }
             /(^|\n)Types:[^\n]*deb/ && !/deb-src/ { sub(/Types:[^\n]*/, "Types: deb-src"); print }' \
            /etc/apt/sources.list.d/debian.sources > "$f"
    else
        grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | sed 's/^deb /deb-src /' > "${f%.sources}.list"
        rm -f "$f"
    fi
    apt-get -q update >/dev/null
}

build() {
    install_packages
    fetch_ucx_source
    if [ ! -x "$SRC/configure" ] || [ "$SRC/configure.ac" -nt "$SRC/configure" ] ||
       [ "$SRC/config/m4/xqp.m4" -nt "$SRC/configure" ] || [ "$SRC/Makefile.am" -nt "$SRC/Makefile.in" ]; then
        log "autogen"
        "$SRC/autogen.sh" >/dev/null 2>&1 || "$SRC/autogen.sh"
    fi
    mkdir -p "$BUILD"
    local flags="--with-ucx-src=$UCX_SRC ${XQP_CONFIGURE_FLAGS:-}"
    if [ ! -f "$BUILD/Makefile" ] || [ "$(cat "$BUILD/.bootstrap-flags" 2>/dev/null)" != "$flags" ]; then
        log "configure $flags"
        # shellcheck disable=SC2086
        (cd "$BUILD" && "$SRC/configure" $flags > configure.out) ||
            { tail -n 20 "$BUILD/configure.out" >&2; die "configure failed (see $BUILD/config.log)"; }
        echo "$flags" > "$BUILD/.bootstrap-flags"
    fi
    log "make -j$JOBS"
    make -C "$BUILD" -j"$JOBS" >/dev/null || make -C "$BUILD"
}

# The integration tests 'check' runs again against the installed Debian
# package (suite.sh test names, a regular expression)
INSTALLED_TESTS='^(UCX under test|ucx_info|module directory|public UCT API|dlopen|version guard|UCP tag_lat|xqp-topo|wireup: endpoints connect|wireup: ECE set|data path: |ucx_perftest|UCP client/server|Open MPI|device removed while connected)'

# check's steps: each one's wall time, printed by step_times at the end
STEP_NAMES=()
STEP_SECS=()
STEP_START=
step() {
    step_end
    log "$*"
    STEP_NAMES+=("$*")
    STEP_START=$SECONDS
}
step_end() {
    [ -n "$STEP_START" ] && STEP_SECS+=($((SECONDS - STEP_START)))
    STEP_START=
}
step_times() {
    local rc=$? i
    step_end
    [ ${#STEP_NAMES[@]} = 0 ] && return "$rc"
    printf '\nbootstrap: step times (%s):\n' "$([ "$rc" = 0 ] && echo passed || echo "failed, status $rc")" >&2
    for i in "${!STEP_NAMES[@]}"; do
        printf '  %6s s  %s\n' "${STEP_SECS[$i]:-?}" "${STEP_NAMES[$i]}" >&2
    done
    printf '  %6s s  total\n' "$SECONDS" >&2
    return "$rc"
}

has_rdma_device() {
    [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]
}

in_testbed() {
    if has_rdma_device; then
        "$@"
    else
        "$SRC/contrib/testbed/xqp-vm" "$@"
    fi
}

if [ "$ACTION" = check ]; then
    trap step_times EXIT
    step "dependencies and build"
fi
build
case "$ACTION" in
    build) log "built in $BUILD" ;;
    demo)
        make -C "$BUILD" install DESTDIR="$BUILD/_stage" >/dev/null 2>&1
        bindir=$(make -C "$BUILD" -s print-bindir)
        cd "$BUILD"
        in_testbed "$SRC/contrib/demo.sh" "$BUILD/_stage$bindir/xqp-run"
        ;;
    check)
        step "unit tests (make check)"
        make -C "$BUILD" -j"$JOBS" check
        step "integration tests (make check-testbed)"
        make -C "$BUILD" check-testbed
        step "cross-host tests in two testbed guests (make check-testbed-hosts)"
        make -C "$BUILD" check-testbed-hosts
        step "integration tests under valgrind memcheck (make check-valgrind)"
        make -C "$BUILD" check-valgrind
        step "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
        mkdir -p "$BUILD-asan"
        if [ ! -f "$BUILD-asan/Makefile" ]; then
            (cd "$BUILD-asan" && "$SRC/configure" --with-ucx-src="$UCX_SRC" --enable-sanitizers \
                 > configure.out) || die "configure --enable-sanitizers failed"
        fi
        make -C "$BUILD-asan" -j"$JOBS" check
        step "unit tests and the data-path gtest under ThreadSanitizer (make check-tsan)"
        mkdir -p "$BUILD-tsan"
        if [ ! -f "$BUILD-tsan/Makefile" ]; then
            (cd "$BUILD-tsan" && "$SRC/configure" --with-ucx-src="$UCX_SRC" \
                 --enable-sanitizers=thread > configure.out) ||
                die "configure --enable-sanitizers=thread failed"
        fi
        make -C "$BUILD-tsan" -j"$JOBS" check
        make -C "$BUILD-tsan" check-tsan
        step "fuzzing the private-data decoder (make fuzz, bounded)"
        make -C "$BUILD" fuzz FUZZ_SECONDS="${XQP_FUZZ_SECONDS:-30}"
        step "Debian package, and the integration suite against it"
        "$SRC/contrib/build-deb.sh" "$UCX_SRC" "$BUILD"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=600 \
            "$BUILD"/deb/ucx-xqp_*.deb >/dev/null
        rc=0
        # the tests that load what the package installed, where: listing,
        # loading, the tools, one wireup, the data path, perftest, UCP and
        # MPI; the fault and scale tests ran against the build above
        XQP_SUITE_ONLY=${XQP_SUITE_ONLY:-$INSTALLED_TESTS} \
            make -C "$BUILD" check-testbed-installed || rc=$?
        dpkg -r ucx-xqp >/dev/null
        [ "$rc" = 0 ] || die "integration suite against the installed package failed"
        step "source and binary RPMs from the spec, and the binary RPM's file list"
        "$SRC/contrib/build-rpm.sh" "$UCX_SRC" "$BUILD"
        step "make distcheck"
        make -C "$BUILD" -j"$JOBS" distcheck >"$BUILD/distcheck.log" 2>&1 ||
            { tail -n 60 "$BUILD/distcheck.log"; die "make distcheck failed"; }
        tail -n 4 "$BUILD/distcheck.log"
        step_end
        log "all tests passed"
        ;;
esac
