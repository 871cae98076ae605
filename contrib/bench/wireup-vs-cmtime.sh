#!/bin/bash
# wireup-vs-cmtime.sh XQP_RUN PEER DEVICE N
#
# Times N connections on DEVICE done two ways in the same run: rdma-core's
# cmtime (the raw external-QP rdma_cm flow: resolve, create QP, connect) and
# xqp (uct_ep_create of N endpoints until all are established, including the
# ECE steps). Prints both, connections per second and the ratio (goal:
# xqp <= 1.2 x cmtime). Both are measured XQP_BENCH_ROUNDS times (default
# 3), alternately, and the medians compared: one run of either varies by
# tens of percent on a loaded machine. Writes the summary to $WORK/bench.txt
# when WORK is set. Fails only when a measurement cannot be made, never on
# speed.
set -u
. "$(dirname "$0")/lib.sh"
run=$1 peer=$2 dev=$3 n=$4
ip=$(device_ip "$dev")
[ -n "$ip" ] || { echo "no IPv4 address on $dev"; exit 1; }
tmp=$(mktemp -d /tmp/xqp-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

rounds=${XQP_BENCH_ROUNDS:-3}

# cmtime: its server never exits by itself
cmtime_ms() {
    local port=$((30000 + RANDOM % 10000)) rc=0
    cmtime -b "$ip" -p "$port" -c "$n" > "$tmp/cm.server" 2>&1 &
    local server=$!
    sleep 1
    timeout 120 cmtime -s "$ip" -p "$port" -c "$n" > "$tmp/cm.client" 2>&1 || rc=$?
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    [ "$rc" = 0 ] || { cat "$tmp/cm.client" >&2; return 1; }
    # the setup steps up to an established connection ("total ms" column)
    awk -F: '/^(create id|resolve addr|resolve route|create qp|connect) *:/ {
                split($2, f, " "); s += f[1] } END { printf "%.1f", s }' "$tmp/cm.client"
}

xqp_ms() {
    local rc=0
    rm -f "$tmp"/a "$tmp"/b "$tmp"/*.done
    "$run" "$peer" --dev "$dev:1" --addr-file "$tmp/a" --expect-passive "$n" \
        --done-file "$tmp/a.done" --wait-for "$tmp/b.done" --timeout 180 > "$tmp/x.server" 2>&1 &
    local server=$!
    "$run" "$peer" --dev "$dev:1" --addr-file "$tmp/b" --connect-to "$tmp/a" --eps "$n" \
        --done-file "$tmp/b.done" --wait-for "$tmp/a.done" --timeout 180 > "$tmp/x.client" 2>&1 || rc=$?
    wait "$server" 2>/dev/null
    [ "$rc" = 0 ] || { cat "$tmp/x.client" >&2; return 1; }
    awk '/^summary / { for (i = 1; i < NF; ++i) if ($i == "seconds") printf "%.1f", $(i + 1) * 1000 }' \
        "$tmp/x.client"
}


cm_all="" xqp_all=""
for _ in $(seq "$rounds"); do
    c=$(cmtime_ms) || { echo "cmtime failed"; exit 1; }
    x=$(xqp_ms) || { echo "xqp connections failed"; exit 1; }
    cm_all="$cm_all $c" xqp_all="$xqp_all $x"
done
cm_ms=$(echo "$cm_all" | median)
xqp_ms=$(echo "$xqp_all" | median)

summary=$(awk -v n="$n" -v r="$rounds" -v x="$xqp_ms" -v c="$cm_ms" 'BEGIN {
    printf "bench: %d connections (median of %d): xqp %.1f ms (%.0f conn/s), cmtime %.1f ms (%.0f conn/s), ratio %.2f (goal <= 1.20)\n",
           n, r, x, n / (x / 1000), c, n / (c / 1000), x / c }')
echo "bench: rounds (ms): xqp$xqp_all; cmtime$cm_all"
echo "$summary"
[ -n "${WORK:-}" ] && echo "$summary" >> "$WORK/bench.txt"
exit 0
