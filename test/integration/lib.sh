# Sourced by the integration scripts (suite.sh, hosts.sh): how a test's
# result is reported, and small helpers they share. Needs bash and, before
# it is sourced, WORK (the script's scratch directory).
#
# One line per test:
#   PASS: NAME (12 s)
#   SKIP: NAME (REASON)            REASON: the last line of the test's output
#   FAIL: NAME (DETAIL, 12 s)      then the last 60 lines of its output, indented
# where the time is the test's wall time in seconds (rounded), and a
# summary at the end: "PREFIX: N passed, N failed, N skipped".
# With XQP_TAP=1 each result is also a TAP line ("ok N - NAME", "ok N - NAME
# # SKIP REASON", "not ok N - NAME") and the summary ends with the plan
# ("1..N"), for automake's TAP driver (make check-testbed).
# ONLY (an extended regular expression, as for grep -E, matched with
# bash's =~; empty: everything) selects the tests that run; each script
# sets it from its own variable (XQP_SUITE_ONLY, XQP_HOSTS_ONLY).

: "${WORK:?lib.sh: WORK must be set}"

passed=0 failed=0 skipped=0
_test_t0=0

# _now_us: the wall clock in microseconds, without a process
_now_us() { _us=${EPOCHREALTIME/[.,]/}; }

# test_selected NAME: false when ONLY leaves the test out
test_selected() { [[ -z ${ONLY:-} || $1 =~ $ONLY ]]; }

# test_begin NAME: false when ONLY leaves the test out; else starts its clock
test_begin() {
    test_selected "$1" || return 1
    _now_us
    _test_t0=$_us
}

# test_seconds: the wall time since test_begin, in whole seconds
test_seconds() {
    _now_us
    echo $(((_us - _test_t0 + 500000) / 1000000))
}

# test_end NAME STATUS LOG [DETAIL]: reports the test that test_begin
# started: PASS when STATUS is 0, SKIP when it is 77, else FAIL with DETAIL
# (default "exit STATUS") and the tail of LOG
test_end() {
    local name=$1 rc=$2 log=$3 detail=${4:-exit $2} s why
    s=$(test_seconds)
    if [[ $rc == 0 ]]; then
        echo "PASS: $name ($s s)"
        passed=$((passed + 1))
        _tap "ok" "$name"
    elif [[ $rc == 77 ]]; then
        why=$(tail -n 1 "$log")
        echo "SKIP: $name ($why)"
        skipped=$((skipped + 1))
        _tap "ok" "$name" " # SKIP $why"
    else
        echo "FAIL: $name ($detail, $s s)"
        sed 's/^/    | /' "$log" | tail -n 60
        failed=$((failed + 1))
        _tap "not ok" "$name"
    fi
}

# _tap RESULT NAME [DIRECTIVE]: the TAP line of the test just counted (with
# XQP_TAP=1); a '#' in NAME would start a directive: it becomes 'no.'
_tap() {
    [[ ${XQP_TAP:-0} == 1 ]] || return 0
    local name=${2//#/no.}
    echo "$1 $((passed + failed + skipped)) - $name${3:-}"
}

# test_summary PREFIX: the counts; false when a test failed, and when none
# passed or failed (ONLY matched nothing, or every test skipped): a run
# that tested nothing is no pass
test_summary() {
    echo "$1: $passed passed, $failed failed, $skipped skipped"
    [[ ${XQP_TAP:-0} != 1 ]] || echo "1..$((passed + failed + skipped))"
    if [[ $((passed + failed)) == 0 ]]; then
        echo "$1: no test ran${ONLY:+ (the pattern '$ONLY' selects $skipped of them)}"
        return 1
    fi
    [[ $failed == 0 ]]
}

# failure_kind STATUS LOG: why a command that exited with STATUS and wrote
# LOG failed, in words a baseline's failure can be compared with:
# "timeout" (timeout(1)'s 124), "signal N" (UCX's "Caught signal N" in
# LOG, or death by a signal), else "exit STATUS"
failure_kind() {
    local rc=$1 log=$2 sig
    if [[ $rc == 124 ]]; then
        echo timeout
        return
    fi
    sig=$(sed -n 's/.*Caught signal \([0-9]*\).*/\1/p' "$log" 2>/dev/null | head -n 1)
    if [[ -n $sig ]]; then
        echo "signal $sig"
    elif ((rc > 128)); then
        echo "signal $((rc - 128))"
    else
        echo "exit $rc"
    fi
}

# UCP's log line of an endpoint configuration (UCX_LOG_LEVEL=info): "ep_cfg[N]:
# tag(...)" before UCX 1.22, "... cfg#N tag(...)" since
EP_CFG='(ep_cfg\[[0-9]+\]|cfg#[0-9]+)'

# nap SECONDS: a sleep without a process (fork+exec is expensive in the testbed)
mkfifo "$WORK/.nap"
exec {_nap_fd}<>"$WORK/.nap"
nap() { read -r -t "$1" -u "$_nap_fd" _ || :; }

# free_port: a random TCP port in 20000-29999 that no socket uses, in any
# state: a port an earlier test's server used keeps its connections in
# TIME_WAIT for a minute, and a new listener's bind on it fails with
# EADDRINUSE (the UCP client/server test's second server, once)
free_port() {
    local p _
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 10000))
        [ -z "$(ss -tanH "sport = :$p" 2>/dev/null)" ] && break
    done
    echo "$p"
}

# wait_listen PORT: until a local TCP listener is on PORT (at most 60 s)
wait_listen() {
    local _
    for _ in $(seq 300); do
        ss -ltnH "sport = :$1" 2>/dev/null | grep -q . && return 0
        nap 0.2
    done
    echo "nothing listens on TCP port $1"
    return 1
}
