#!/bin/bash
# Host-side checks of lib.sh, the integration scripts' reporting (make
# check): a run that tested nothing fails, skips alone are no pass, and
# failure_kind tells a timeout, a crash and an exit apart.
set -u
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# shellcheck source=test/integration/lib.sh
. "$(dirname "$0")/lib.sh"
bad=0
check() { # check WHAT EXPECTED ACTUAL
    if [[ $2 == "$3" ]]; then
        echo "ok: $1"
    else
        echo "not ok: $1: expected '$2', got '$3'"
        bad=$((bad + 1))
    fi
}
summary_status() { # summary_status PASSED FAILED SKIPPED [ONLY]
    (passed=$1 failed=$2 skipped=$3 ONLY=${4:-}; test_summary t > "$WORK/out"; echo $?)
}
check "no test selected fails" 1 "$(summary_status 0 0 0 'no such test')"
grep -q "no test ran (the pattern 'no such test' selects 0 of them)" "$WORK/out" ||
    { echo "not ok: the message says why"; cat "$WORK/out"; bad=$((bad + 1)); }
check "only skips fail" 1 "$(summary_status 0 0 3)"
check "a pass with skips passes" 0 "$(summary_status 1 0 3)"
check "a failure fails" 1 "$(summary_status 5 1 0)"
echo "[ 12.3] Caught signal 11 (Segmentation fault: address not mapped)" > "$WORK/crash"
: > "$WORK/empty"
check "timeout" timeout "$(failure_kind 124 "$WORK/crash")"
check "UCX's crash line" "signal 11" "$(failure_kind 1 "$WORK/crash")"
check "killed by a signal" "signal 9" "$(failure_kind 137 "$WORK/empty")"
check "plain exit" "exit 1" "$(failure_kind 1 "$WORK/empty")"
# TAP (XQP_TAP=1): one line a result, numbered in order, the plan last
tap_run() (
    XQP_TAP=1 passed=0 failed=0 skipped=0
    echo "the reason" > "$WORK/why"
    test_begin "first"; test_end "first" 0 "$WORK/why"
    test_begin "second #2"; test_end "second #2" 77 "$WORK/why"
    test_begin "third"; test_end "third" 1 "$WORK/why" "exit 1"
    test_summary t
)
tap_run > "$WORK/tap"
check "TAP lines" "ok 1 - first|ok 2 - second no.2 # SKIP the reason|not ok 3 - third|1..3" \
    "$(grep -E '^(ok|not ok|1\.\.)' "$WORK/tap" | paste -sd '|')"
check "no TAP without XQP_TAP" "" \
    "$(passed=0 failed=0 skipped=0; test_end x 0 "$WORK/why" | grep -E '^(ok|not ok)')"
echo "lib.sh: $bad failed"
[[ $bad == 0 ]]
