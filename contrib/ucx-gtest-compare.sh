#!/bin/bash
# contrib/ucx-gtest-compare.sh RUN_DIR - which of rc_verbs' passes xqp does not
# pass, from a contrib/ucx-gtest.sh run of both transports (its log directory,
# with RUN_DIR/rc_verbs.GROUP.res and RUN_DIR/xqp.GROUP.res).
#
# Tests are matched by name without their instantiation prefix (UCT:
# rc_verbs/ and xqp/; UCP: rc/ and xqp/). The cases UCX instantiates for its
# IB transports only, listed in RUN_DIR/ib-only (ucx-gtest.sh writes it), are
# not run for xqp: they are counted apart. Prints per group the rc_verbs
# passes, how many of them xqp passes, and the others with xqp's result
# (FAIL, CRASH, HANG, SKIP or "not run").
#
# Exit status: 0 when xqp passes every rc_verbs pass that is run for it,
# 1 otherwise, 2 on usage errors.
set -euo pipefail

case "${1:-}" in
    ""|-h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
RUN=$1
compgen -G "$RUN/rc_verbs.*.res" >/dev/null && compgen -G "$RUN/xqp.*.res" >/dev/null || {
    echo "ucx-gtest-compare: error: $RUN has no results of both rc_verbs and xqp" >&2
    exit 2
}
ib_only=$(cat "$RUN/ib-only" 2>/dev/null || :)

missing=0
for rc in "$RUN"/rc_verbs.*.res; do
    group=${rc#"$RUN"/rc_verbs.}
    group=${group%.res}
    awk -v ib_only="$ib_only" -v group="$group" '
        function bare(name) { sub(/^[^\/]*\//, "", name); return name }
        BEGIN { n = split(ib_only, l, " "); for (i = 1; i <= n; i++) ib[l[i]] = 1 }
        FNR == NR { xqp[bare($2)] = $1; next }
        $1 == "PASS" {
            t = bare($2); c = t; sub(/\..*/, "", c)
            if (c in ib) { skipped++; next }
            passes++
            if (xqp[t] == "PASS") { both++; next }
            out[++m] = "    " (t in xqp ? xqp[t] : "not run") " " t
        }
        END {
            printf "%s: rc_verbs passes %d, xqp passes %d of them", group, passes, both
            if (skipped) printf " (%d IB-only cases not run for xqp)", skipped
            print ""
            for (i = 1; i <= m; i++) print out[i]
            exit (m > 0)
        }' "$RUN/xqp.$group.res" "$rc" || missing=1
done
exit "$missing"
