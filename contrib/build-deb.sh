#!/bin/bash
# contrib/build-deb.sh [UCX_SRC_DIR] [BUILD_DIR] - build the ucx-xqp Debian
# package from a configured xqp build tree.
#
#   UCX_SRC_DIR  source tree of the installed UCX release (default: the
#                --with-ucx-src BUILD_DIR was configured with; '' keeps it)
#   BUILD_DIR    configured build tree, with its Makefile (default: ./build).
#                Without a Makefile there, it is configured first, which then
#                needs UCX_SRC_DIR.
#
# Runs 'make dist', unpacks the tarball in a temporary directory, adds the
# packaging (contrib/debian as debian/), installs missing build dependencies
# when run as root (apt-get), runs 'dpkg-buildpackage -us -uc -b' with
# XQP_UCX_SRC=UCX_SRC_DIR and leaves the packages in BUILD_DIR/deb/.
#
# Environment:
#   DEB_BUILD_OPTIONS  passed on (nocheck: skip the unit tests)
#   XQP_NO_APT=1       never install packages
#   XQP_KEEP_TMP=1     keep the temporary directory
#   XQP_NO_LINTIAN=1   do not run lintian on the result (run when installed:
#                      its errors fail the build, its warnings are listed)
# shellcheck disable=SC2015  # "A && B || C": A && B is the condition
set -euo pipefail

SRC=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)
UCX_SRC=${1:-}
BUILD=${2:-build}

log() { printf '[build-deb] %s\n' "$*" >&2; }
die() { printf 'build-deb: error: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 && !/shellcheck/' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[ $# -le 2 ] || die "usage: $0 [UCX_SRC_DIR] [BUILD_DIR]"

apt_install() {
    [ "${XQP_NO_APT:-0}" = 1 ] && die "missing: $* (XQP_NO_APT=1)"
    [ "$(id -u)" = 0 ] || die "missing: $*; install them or run as root"
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=600 "$@" >/dev/null ||
        { apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
              -o DPkg::Lock::Timeout=600 "$@" >/dev/null; } ||
        die "apt-get install $* failed"
}

is_ucx_src() { [ -f "$1/src/uct/base/uct_iface.h" ] && [ -f "$1/configure.ac" ]; }
[ -z "$UCX_SRC" ] || is_ucx_src "$UCX_SRC" || die "$UCX_SRC is not a UCX source tree"

# ---------------------------------------------------------------- build tree
if [ ! -f "$BUILD/Makefile" ]; then
    [ -n "$UCX_SRC" ] || die "$BUILD has no Makefile: configure it, or pass UCX_SRC_DIR to have it configured"
    if [ ! -x "$SRC/configure" ]; then
        log "autogen"
        "$SRC/autogen.sh" >/dev/null
    fi
    log "configure in $BUILD"
    mkdir -p "$BUILD"
    (cd "$BUILD" && "$SRC/configure" --with-ucx-src="$UCX_SRC" > configure.out) ||
        { tail -n 20 "$BUILD/configure.out" >&2; die "configure failed"; }
fi
BUILD=$(cd "$BUILD" && pwd)
mkvar() { sed -n "s/^$1 = //p" "$BUILD/Makefile" | head -n 1; }
VERSION=$(mkvar PACKAGE_VERSION)
TOP_SRC=$(mkvar abs_top_srcdir)
[ -n "$VERSION" ] && [ -n "$TOP_SRC" ] || die "$BUILD/Makefile is not an xqp build tree"
UCX_SRC=${UCX_SRC:-$(mkvar with_ucx_src)}
[ -n "$UCX_SRC" ] || die "no UCX_SRC_DIR given and $BUILD was configured without --with-ucx-src"
is_ucx_src "$UCX_SRC" || die "$UCX_SRC is not a UCX source tree"
UCX_SRC=$(cd "$UCX_SRC" && pwd)

# ---------------------------------------------------------------- tools
command -v dpkg-buildpackage >/dev/null && command -v dpkg-checkbuilddeps >/dev/null ||
    apt_install dpkg-dev
command -v dh >/dev/null || apt_install debhelper

# ---------------------------------------------------------------- source
log "make dist (xqp $VERSION)"
rm -f "$BUILD/xqp-$VERSION.tar.gz"
make -C "$BUILD" -s dist >/dev/null
TARBALL=$BUILD/xqp-$VERSION.tar.gz
[ -f "$TARBALL" ] || die "make dist did not produce $TARBALL"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/xqp-deb.XXXXXX")
cleanup() {
    if [ "${XQP_KEEP_TMP:-0}" = 1 ] || [ "${ok:-0}" != 1 ]; then
        log "temporary directory kept: $TMP"
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT
cp "$TARBALL" "$TMP/ucx-xqp_$VERSION.orig.tar.gz"
tar -xzf "$TMP/ucx-xqp_$VERSION.orig.tar.gz" -C "$TMP"
PKG=$TMP/xqp-$VERSION
[ -d "$PKG" ] || die "the tarball has no xqp-$VERSION/ directory"

# The packaging and the man pages come from the tarball; until Makefile.am
# distributes them, from the source tree of the build.
if [ -d "$PKG/contrib/debian" ]; then
    cp -a "$PKG/contrib/debian" "$PKG/debian"
else
    [ -d "$TOP_SRC/contrib/debian" ] || die "no contrib/debian in the tarball or in $TOP_SRC"
    log "warning: the tarball lacks contrib/debian (EXTRA_DIST); using $TOP_SRC/contrib/debian"
    cp -a "$TOP_SRC/contrib/debian" "$PKG/debian"
fi
while read -r man; do
    [ -n "$man" ] && [ ! -f "$PKG/$man" ] || continue
    [ -f "$TOP_SRC/$man" ] || die "$man is missing from the tarball and from $TOP_SRC"
    log "warning: the tarball lacks $man (dist_man_MANS); using $TOP_SRC/$man"
    mkdir -p "$PKG/$(dirname "$man")"
    cp "$TOP_SRC/$man" "$PKG/$man"
done < "$PKG/debian/ucx-xqp.manpages"

# A release without a changelog entry yet gets one, so that the package
# version always carries the upstream version.
DEB_UPSTREAM=$(dpkg-parsechangelog -l "$PKG/debian/changelog" -S Version | sed -e 's/^[0-9]*://' -e 's/-[^-]*$//')
if [ "$DEB_UPSTREAM" != "$VERSION" ]; then
    who=$(sed -n 's/^Maintainer: //p' "$PKG/debian/control")
    [ -n "${DEBFULLNAME:-}" ] && [ -n "${DEBEMAIL:-}" ] && who="$DEBFULLNAME <$DEBEMAIL>"
    log "debian/changelog is for $DEB_UPSTREAM: adding an entry for $VERSION-1"
    { printf 'ucx-xqp (%s-1) unstable; urgency=medium\n\n' "$VERSION"
      printf '  * Package of xqp %s (contrib/build-deb.sh).\n\n' "$VERSION"
      printf ' -- %s  %s\n\n' "$who" "$(date -R)"
      cat "$PKG/debian/changelog"; } > "$PKG/debian/changelog.new"
    mv "$PKG/debian/changelog.new" "$PKG/debian/changelog"
fi

# ---------------------------------------------------------------- build deps
if ! (cd "$PKG" && dpkg-checkbuilddeps) 2>"$TMP/builddeps.txt"; then
    [ "${XQP_NO_APT:-0}" != 1 ] && [ "$(id -u)" = 0 ] ||
        die "$(sed 's/^dpkg-checkbuilddeps: error: //' "$TMP/builddeps.txt")"
    log "$(sed 's/^dpkg-checkbuilddeps: error: //' "$TMP/builddeps.txt")"
    log "apt-get build-dep"
    (cd "$PKG" && DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -q \
        -o DPkg::Lock::Timeout=600 ./ >/dev/null) ||
        die "apt-get build-dep failed"
fi

# ---------------------------------------------------------------- build
log "dpkg-buildpackage -us -uc -b (XQP_UCX_SRC=$UCX_SRC)"
(cd "$PKG" && XQP_UCX_SRC=$UCX_SRC dpkg-buildpackage -us -uc -b -Jauto) > "$TMP/build.log" 2>&1 ||
    { grep -E -i '(^|[ :])(fatal )?error' "$TMP/build.log" | tail -n 15 >&2
      die "dpkg-buildpackage failed (log: $TMP/build.log)"; }

OUT=$BUILD/deb
mkdir -p "$OUT"
rm -f "$OUT"/ucx-xqp*.deb "$OUT"/ucx-xqp_*.changes "$OUT"/ucx-xqp_*.buildinfo "$OUT"/build.log
cp "$TMP"/ucx-xqp*.deb "$TMP"/ucx-xqp_*.changes "$TMP"/ucx-xqp_*.buildinfo "$TMP/build.log" "$OUT/"

if [ "${XQP_NO_LINTIAN:-0}" != 1 ] && command -v lintian >/dev/null; then
    log "lintian"
    # errors fail the build; warnings and notes are listed, and counted
    lrc=0
    lintian --info --fail-on error "$OUT"/ucx-xqp_*.changes > "$OUT/lintian.txt" 2>&1 || lrc=$?
    grep -v '^running with root privileges' "$OUT/lintian.txt" >&2 || :
    log "lintian: $(grep -c '^E: ' "$OUT/lintian.txt") errors, $(grep -c '^W: ' "$OUT/lintian.txt") warnings ($OUT/lintian.txt)"
    [ "$lrc" = 0 ] || die "lintian found errors in the package (above; status $lrc)"
fi
ok=1
log "packages in $OUT:"
ls -1 "$OUT"/*.deb
