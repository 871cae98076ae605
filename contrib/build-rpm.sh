#!/bin/bash
# contrib/build-rpm.sh [UCX_SRC_DIR] [BUILD_DIR] - build xqp's source and
# binary RPMs from a configured xqp build tree, and check the binary
# package's file list.
#
#   UCX_SRC_DIR  source tree of the installed UCX release (default: the
#                --with-ucx-src BUILD_DIR was configured with)
#   BUILD_DIR    configured build tree, with its Makefile (default: ./build)
#
# Runs 'make dist', then 'rpmbuild -bs' and 'rpmbuild -bb' on
# contrib/rpm/xqp.spec with the macro ucx_src=UCX_SRC_DIR. Where rpm does
# not know the build dependencies (on Debian, whose packages rpm cannot see)
# the binary build runs with --nodeps. The binary package must hold exactly:
# the plugin in UCX's module directory (%{_libdir}/ucx/libuct_xqp.so.0 and its
# real file), xqp-run and xqp-topo in %{_bindir}, their man pages and xqp(7),
# and the license and docs; no libtool archive, no development symlink.
# Leaves the packages in BUILD_DIR/rpm/.
#
# Environment:
#   XQP_RPM_CHECK=1  run the spec's %check (the unit tests) too; off by
#                    default, since 'make check' runs them on the build tree
#   XQP_KEEP_TMP=1   keep the temporary rpmbuild tree
set -euo pipefail

SRC=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)
UCX_SRC=${1:-}
BUILD=${2:-build}
SPEC=$SRC/contrib/rpm/xqp.spec

log() { printf '[build-rpm] %s\n' "$*" >&2; }
die() { printf 'build-rpm: error: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[ $# -le 2 ] || die "usage: $0 [UCX_SRC_DIR] [BUILD_DIR]"
command -v rpmbuild >/dev/null || die "rpmbuild not found (Debian: apt-get install rpm)"
[ -f "$BUILD/Makefile" ] || die "$BUILD has no Makefile: configure xqp there first"
BUILD=$(cd "$BUILD" && pwd)
mkvar() { sed -n "s/^$1 = //p" "$BUILD/Makefile" | head -n 1; }
VERSION=$(mkvar PACKAGE_VERSION)
[ -n "$VERSION" ] || die "$BUILD/Makefile is not an xqp build tree"
UCX_SRC=${UCX_SRC:-$(mkvar with_ucx_src)}
[ -f "$UCX_SRC/src/uct/base/uct_iface.h" ] || die "'$UCX_SRC' is not a UCX source tree"
UCX_SRC=$(cd "$UCX_SRC" && pwd)
spec_version=$(sed -n 's/^Version: *//p' "$SPEC")
[ "$spec_version" = "$VERSION" ] ||
    die "contrib/rpm/xqp.spec says Version $spec_version, configure.ac says $VERSION"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/xqp-rpm.XXXXXX")
cleanup() {
    if [ "${XQP_KEEP_TMP:-0}" = 1 ] || [ "${ok:-0}" != 1 ]; then
        log "temporary directory kept: $TMP"
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT

log "make dist (xqp $VERSION)"
rm -f "$BUILD/xqp-$VERSION.tar.gz"
make -C "$BUILD" -s dist-gzip >/dev/null
mkdir -p "$TMP/SOURCES"
cp "$BUILD/xqp-$VERSION.tar.gz" "$TMP/SOURCES/"

rpmbuild_() {
    local what=$1; shift
    rpmbuild "$@" --define "_topdir $TMP" --define "ucx_src $UCX_SRC" "$SPEC" \
        > "$TMP/$what.log" 2>&1 ||
        { grep -E -i '(^|[ :])(fatal )?error' "$TMP/$what.log" | tail -n 15 >&2
          die "rpmbuild $1 failed (log: $TMP/$what.log)"; }
}

log "source RPM (rpmbuild -bs)"
rpmbuild_ srpm -bs

# rpm on Debian knows no installed package, so it would refuse every
# BuildRequires; the build itself finds them through configure
nodeps=()
rpm -q --quiet ucx-devel 2>/dev/null || nodeps=(--nodeps)
check=(--without check)
[ "${XQP_RPM_CHECK:-0}" = 1 ] && check=()
log "binary RPM (rpmbuild -bb ${nodeps[*]} ${check[*]})"
rpmbuild_ rpm -bb "${nodeps[@]}" "${check[@]}"

srpm=$(ls "$TMP"/SRPMS/xqp-"$VERSION"-*.src.rpm)
brpm=$(ls "$TMP"/RPMS/*/xqp-"$VERSION"-*.rpm | grep -v -- '-debug')

# ---------------------------------------------------------------- file list
libdir=$(rpm --eval '%{_libdir}')
bindir=$(rpm --eval '%{_bindir}')
mandir=$(rpm --eval '%{_mandir}')
docdir=$(rpm --eval '%{_defaultdocdir}')
licdir=$(rpm --eval '%{_defaultlicensedir}')
rpm -qlp "$brpm" | grep -v '/\.build-id' > "$TMP/files"
expect() {   # a file the package must hold (an extended regular expression)
    grep -E -q "^$1\$" "$TMP/files" || { missing="$missing $1"; }
}
missing=
expect "$libdir/ucx/libuct_xqp\.so\.0"
expect "$libdir/ucx/libuct_xqp\.so\.0\.0\.0"
expect "$bindir/xqp-run"
expect "$bindir/xqp-topo"
expect "$mandir/man1/xqp-run\.1(\.gz|\.bz2|\.xz|\.zst)?"
expect "$mandir/man1/xqp-topo\.1(\.gz|\.bz2|\.xz|\.zst)?"
expect "$mandir/man7/xqp\.7(\.gz|\.bz2|\.xz|\.zst)?"
expect "$licdir/xqp(-$VERSION)?/LICENSE"
expect "$docdir/xqp(-$VERSION)?/README\.md"
[ -z "$missing" ] || { cat "$TMP/files" >&2; die "the binary RPM lacks:$missing"; }
unexpected=$(grep -E -v "^($libdir/ucx/libuct_xqp\.so\.0(\.0\.0)?|$bindir/xqp-(run|topo)|$mandir/.*|$docdir/xqp.*|$licdir/xqp.*|/usr/lib)$" \
    "$TMP/files" || :)
[ -z "$unexpected" ] || die "the binary RPM holds files it should not: $(echo "$unexpected" | tr '\n' ' ')"
# the plugin must be the real library, not a dangling link
long=$(rpm -qlvp "$brpm")
grep -E -q "^-.* $libdir/ucx/libuct_xqp\.so\.0\.0\.0\$" <<< "$long" ||
    die "$libdir/ucx/libuct_xqp.so.0.0.0 is not a regular file in the binary RPM"

OUT=$BUILD/rpm
mkdir -p "$OUT"
rm -f "$OUT"/xqp-*.rpm
cp "$srpm" "$brpm" "$OUT/"
ok=1
log "file list checked ($(wc -l < "$TMP/files") entries); packages in $OUT:"
ls -1 "$OUT"/*.rpm
