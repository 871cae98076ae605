#!/bin/sh
# doc/check-man-vars.sh [XQP_RUN] - fail when a UCX_XQP_* variable that
# 'ucx_info -c' lists (through xqp-run) is not documented in doc/xqp.7, or
# when xqp.7 documents one that no longer exists.
#   XQP_RUN  the xqp-run to use (default: xqp-run in PATH)
set -eu
run=${1:-xqp-run}
man=$(dirname "$0")/xqp.7
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$run" ucx_info -c | sed -n 's/^\(UCX_XQP_[A-Z0-9_]*\)=.*/\1/p' | sort -u > "$tmp/listed"
[ -s "$tmp/listed" ] || { echo "check-man-vars: $run ucx_info -c lists no UCX_XQP_ variable" >&2; exit 1; }
# documented variables: the tags of .TP entries (".TP" then ".BI UCX_XQP_X= ...")
awk 'tp && /^\.B[IR]? UCX_XQP_/ { v = $2; sub(/[^A-Z0-9_].*/, "", v); print v }
     { tp = ($1 == ".TP") }' "$man" | sort -u > "$tmp/documented"
rc=0
for v in $(comm -23 "$tmp/listed" "$tmp/documented"); do echo "xqp.7: $v is not documented" >&2; rc=1; done
for v in $(comm -13 "$tmp/listed" "$tmp/documented"); do echo "xqp.7: $v is documented but ucx_info -c does not list it" >&2; rc=1; done
[ "$rc" = 0 ] && echo "xqp.7 documents all $(wc -l < "$tmp/listed") UCX_XQP_ variables"
exit "$rc"
