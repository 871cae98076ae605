#!/bin/bash
# wireup-vs-cmtime.sh XQP_RUN PEER DEVICE N
#
# Times N connections on DEVICE done two ways in the same run: rdma-core's
# cmtime (the raw external-QP rdma_cm flow: resolve, create QP, connect) and
# xqp (uct_ep_create of N endpoints until all are established, including the
# ECE steps), with connection sharing on (UCX_XQP_SHARE=y, the default) and
# off. Prints each, connections per second and the ratios to cmtime (goal,
# #36: xqp with sharing <= 1.0 x cmtime, and no slower than without it). One
# run of any varies by tens of percent on a loaded machine, so they are
# compared in XQP_BENCH_ROUNDS paired rounds (default 9) and the medians of
# the rounds' ratios are reported. Writes the
# summary to $WORK/bench.txt when WORK is set. Fails only when a measurement
# cannot be made, never on speed.
set -u
. "$(dirname "$0")/lib.sh"
run=$1 peer=$2 dev=$3 n=$4
ip=$(device_ip "$dev")
[ -n "$ip" ] || { echo "no IPv4 address on $dev"; exit 1; }
tmp=$(mktemp -d /tmp/xqp-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

rounds=${XQP_BENCH_ROUNDS:-9}

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

# xqp_ms SHARE: N endpoints with UCX_XQP_SHARE=SHARE on both sides
xqp_ms() {
    local rc=0
    export UCX_XQP_SHARE=$1
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


# paired rounds, as in datapath.sh: xqp shared, xqp unshared, cmtime,
# cmtime, xqp unshared, xqp shared; each keeps the faster of its two runs
# (a stall only slows a run down) and the round's ratios are taken from those
x_all="" u_all="" c_all="" ratios="" uratios=""
for round in $(seq "$rounds"); do
    x1=$(xqp_ms y) || { echo "xqp connections failed"; exit 1; }
    u1=$(xqp_ms n) || { echo "xqp connections (UCX_XQP_SHARE=n) failed"; exit 1; }
    c1=$(cmtime_ms) || { echo "cmtime failed"; exit 1; }
    c2=$(cmtime_ms) || { echo "cmtime failed"; exit 1; }
    u2=$(xqp_ms n) || { echo "xqp connections (UCX_XQP_SHARE=n) failed"; exit 1; }
    x2=$(xqp_ms y) || { echo "xqp connections failed"; exit 1; }
    echo "bench: round $round (ms): xqp $x1 $x2, xqp unshared $u1 $u2, cmtime $c1 $c2"
    read -r x u c r ur <<< "$(awk -v a="$x1" -v b="$x2" -v e="$u1" -v f="$u2" -v c="$c1" -v d="$c2" 'BEGIN {
        x = (a < b) ? a : b; u = (e < f) ? e : f; c = (c < d) ? c : d
        printf "%.1f %.1f %.1f %.4f %.4f", x, u, c, x / c, u / c }')"
    x_all="$x_all $x" u_all="$u_all $u" c_all="$c_all $c" ratios="$ratios $r" uratios="$uratios $ur"
done
x_ms=$(echo "$x_all" | median)
u_ms=$(echo "$u_all" | median)
c_ms=$(echo "$c_all" | median)
ratio=$(echo "$ratios" | median)
uratio=$(echo "$uratios" | median)
lo_hi=$(echo "$ratios" | range)

summary=$(awk -v n="$n" -v r="$rounds" -v x="$x_ms" -v u="$u_ms" -v c="$c_ms" -v q="$ratio" -v uq="$uratio" \
              -v lh="$lo_hi" 'BEGIN {
    printf "bench: %d connections (medians of %d rounds): xqp %.1f ms (%.0f conn/s), UCX_XQP_SHARE=n %.1f ms, cmtime %.1f ms (%.0f conn/s), ratio %.2f (range %s; goal <= 1.0, %s), unshared %.2f (goal: shared <= unshared, %s)\n",
           n, r, x, n / (x / 1000), u, c, n / (c / 1000), q, lh, (q <= 1.0) ? "met" : "not met",
           uq, (q <= uq) ? "met" : "not met" }')
echo "$summary"
[ -n "${WORK:-}" ] && echo "$summary" >> "$WORK/bench.txt"
echo "bench: wireup-vs-cmtime.sh took $SECONDS s"
exit 0
