#!/bin/bash
# contrib/ci-ucx-releases.sh [BUDGET_SECONDS] - the UCX releases besides
# the system's, on demand (CI does not run it): runs contrib/check-ucx-release.sh for each
# UCX source tree found in the tree cache, as long as the time budget lasts,
# and says which releases ran, which were not available and which did not
# fit.
#
# The tree cache is a directory of unpacked UCX release trees named
# ucx-X.Y.Z, e.g. made from the openucx/ucx repository with
#   git -C UCX_GIT_DIR archive --prefix=ucx-1.22.0/ v1.22.0 | tar -x -C DIR
# or from a release tarball. A release without a tree is reported as not
# available and never fails this step; a release whose tree is there must
# pass. UCX builds are cached by check-ucx-release.sh, so a repeated run only
# builds xqp and runs the tests.
#
#   BUDGET_SECONDS  start no release that might not end within this many
#                   seconds (default: 2400); a release is assumed to take as
#                   long as the longest one so far, at least 600 s, or 900 s
#                   while its UCX is not built yet
#
# Environment:
#   XQP_UCX_TREES      the tree cache (default: /var/cache/xqp-ucx/src)
#   XQP_UCX_RELEASES   the releases to report on (default: the README's
#                      tested ones, 1.12.1 1.16.0 1.18.1 1.20.1 1.22.0); a tree
#                      of another release in the cache runs too
#   XQP_SUITE_ONLY     passed on: which suite tests run (default: all)
#
# Exit status: 0 when every release that ran passed (or none ran), 1 otherwise.
set -uo pipefail

SRC=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")/.." && pwd)
TREES=${XQP_UCX_TREES:-/var/cache/xqp-ucx/src}
RELEASES=${XQP_UCX_RELEASES:-1.12.1 1.16.0 1.18.1 1.20.1 1.22.0}
BUDGET=${1:-2400}

log() { printf '[ucx-releases %5ss] %s\n' "$SECONDS" "$*" >&2; }

case "$BUDGET" in
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    ''|*[!0-9]*) echo "ci-ucx-releases: error: BUDGET_SECONDS must be a number of seconds, not '$BUDGET'" >&2; exit 2 ;;
esac

# shellcheck source=contrib/ucx-tree.sh
. "$SRC/contrib/ucx-tree.sh"

# the trees in the cache, by version
declare -A tree_of=()
for dir in "$TREES"/ucx-*; do
    [ -f "$dir/src/uct/base/uct_iface.h" ] && [ -f "$dir/configure.ac" ] || continue
    tree_of[$(ucx_tree_version "$dir")]=$dir
done
versions=$(printf '%s\n' $RELEASES "${!tree_of[@]}" | sort -u -V)

ran=() failed=() missing=() over=() lines=()
longest=0 status=0
for v in $versions; do
    [ -n "${tree_of[$v]:-}" ] || { missing+=("$v"); continue; }
    estimate=$(( longest > 600 ? longest : 600 ))
    compgen -G "${XQP_UCX_RELEASE_CACHE:-/var/cache/xqp-ucx-release}/ucx-$v-*/.built" >/dev/null ||
        estimate=$(( estimate > 900 ? estimate : 900 ))
    if [ $(( SECONDS + estimate )) -gt "$BUDGET" ]; then
        over+=("$v")
        continue
    fi
    log "UCX $v from ${tree_of[$v]} (budget left: $(( BUDGET - SECONDS )) s)"
    start=$SECONDS
    out=$("$SRC/contrib/check-ucx-release.sh" "${tree_of[$v]}" 2> >(cat >&2))
    rc=$?
    took=$(( SECONDS - start ))
    [ "$took" -gt "$longest" ] && longest=$took
    line=$(grep "^UCX $v:" <<< "$out" | tail -n 1)
    lines+=("${line:-UCX $v: no result (status $rc)} ($took s)")
    ran+=("$v")
    [ "$rc" = 0 ] || { failed+=("$v"); status=1; }
done

for line in "${lines[@]}"; do echo "$line"; done
echo "UCX releases tested: ${ran[*]:-none}${failed:+ (failed: ${failed[*]})}"
[ ${#missing[@]} = 0 ] ||
    echo "UCX releases not available (no tree in $TREES): ${missing[*]}"
[ ${#over[@]} = 0 ] ||
    echo "UCX releases not run (over the time budget of $BUDGET s): ${over[*]}"
exit "$status"
