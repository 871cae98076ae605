#!/bin/bash
# wireup-vs-cmtime.sh XQP_RUN PEER DEVICE N
#
# Times N connections on DEVICE done two ways in the same run: rdma-core's
# cmtime (the raw external-QP rdma_cm flow: resolve, create QP, connect) and
# xqp (uct_ep_create of N endpoints until all are established, including the
# ECE steps), with connection sharing on (UCX_XQP_SHARE=y, the default) and
# off. Prints each, connections per second and the ratios to cmtime (goal,
# #36: xqp with sharing <= 1.0 x cmtime, and no slower than without it).
# cmtime's QPs hold one send request; xqp's hold UCX_XQP_TX_QUEUE_LEN (255),
# and on rxe creating one costs several times as much (the kernel clears
# the send queue's pages: 128 KiB for 255 requests of 8 SGEs or 128 B
# inline, 256 slots of 512 B, against 4 KiB). So xqp also runs with
# sharing on and UCX_XQP_TX_QUEUE_LEN=1, cmtime's depth: that ratio is
# the wireup's own cost, the other the real QPs'. In those runs only one
# side creates endpoints; in UCP and MPI both do, which is what sharing is
# for (one connection per pair instead of two): the last figures time both
# sides creating N endpoints to each other at once, with sharing on and
# off (the slower side's time). One
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

# xqp_ms SHARE [TX_QUEUE_LEN]: one way, N endpoints from one side to the
# other, which only accepts, with UCX_XQP_SHARE=SHARE (and
# UCX_XQP_TX_QUEUE_LEN when given) on both sides.
# xqp_ms SHARE both: both sides create N endpoints to each other at once.
# Prints the slower side's time (one way, only the connecting side has one).
xqp_ms() {
    local rc=0 server_rc=0 both=n txq=${2:-}
    local -a side_a=(--expect-passive "$n")
    if [ "$txq" = both ]; then
        both=y txq=""
        side_a=(--connect-to "$tmp/b" --eps "$n")
    fi
    export UCX_XQP_SHARE=$1
    if [ -n "$txq" ]; then
        export UCX_XQP_TX_QUEUE_LEN=$txq
    else
        unset UCX_XQP_TX_QUEUE_LEN
    fi
    rm -f "$tmp"/a "$tmp"/b "$tmp"/*.done
    "$run" "$peer" --dev "$dev:1" --addr-file "$tmp/a" "${side_a[@]}" \
        --done-file "$tmp/a.done" --wait-for "$tmp/b.done" --timeout 180 > "$tmp/x.server" 2>&1 &
    local server=$!
    "$run" "$peer" --dev "$dev:1" --addr-file "$tmp/b" --connect-to "$tmp/a" --eps "$n" \
        --done-file "$tmp/b.done" --wait-for "$tmp/a.done" --timeout 180 > "$tmp/x.client" 2>&1 || rc=$?
    wait "$server" 2>/dev/null || server_rc=$?
    # one way, the accepting side's status is not part of the measurement
    [ "$both" = y ] && [ "$server_rc" != 0 ] && rc=1
    [ "$rc" = 0 ] || { cat "$tmp/x.server" "$tmp/x.client" >&2; return 1; }
    awk '/^summary / { for (i = 1; i < NF; ++i) if ($i == "seconds" && $(i + 1) * 1000 > t) t = $(i + 1) * 1000 }
         END { printf "%.1f", t }' "$tmp/x.server" "$tmp/x.client"
}

# faster A B: the smaller of two times; per X Y: X / Y
faster() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (a < b) ? a : b }'; }
per() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", a / b }'; }

# paired rounds, as in datapath.sh: xqp shared, xqp unshared, xqp shallow
# (UCX_XQP_TX_QUEUE_LEN=1), cmtime, cmtime, xqp shallow, xqp unshared, xqp
# shared, then both sides shared, unshared, unshared, shared; each keeps the
# faster of its two runs (a stall only slows a run down) and the round's
# ratios are taken from those
x_all="" u_all="" s_all="" c_all="" ratios="" uratios="" sratios="" b_all="" v_all="" bratios=""
for round in $(seq "$rounds"); do
    x1=$(xqp_ms y) || { echo "xqp connections failed"; exit 1; }
    u1=$(xqp_ms n) || { echo "xqp connections (UCX_XQP_SHARE=n) failed"; exit 1; }
    s1=$(xqp_ms y 1) || { echo "xqp connections (UCX_XQP_TX_QUEUE_LEN=1) failed"; exit 1; }
    c1=$(cmtime_ms) || { echo "cmtime failed"; exit 1; }
    c2=$(cmtime_ms) || { echo "cmtime failed"; exit 1; }
    s2=$(xqp_ms y 1) || { echo "xqp connections (UCX_XQP_TX_QUEUE_LEN=1) failed"; exit 1; }
    u2=$(xqp_ms n) || { echo "xqp connections (UCX_XQP_SHARE=n) failed"; exit 1; }
    x2=$(xqp_ms y) || { echo "xqp connections failed"; exit 1; }
    b1=$(xqp_ms y both) || { echo "xqp connections from both sides failed"; exit 1; }
    v1=$(xqp_ms n both) || { echo "xqp connections from both sides (UCX_XQP_SHARE=n) failed"; exit 1; }
    v2=$(xqp_ms n both) || { echo "xqp connections from both sides (UCX_XQP_SHARE=n) failed"; exit 1; }
    b2=$(xqp_ms y both) || { echo "xqp connections from both sides failed"; exit 1; }
    echo "bench: round $round (ms): xqp $x1 $x2, xqp unshared $u1 $u2, xqp 1-entry send queue $s1 $s2, cmtime $c1 $c2, both sides $b1 $b2, both sides unshared $v1 $v2"
    x=$(faster "$x1" "$x2") u=$(faster "$u1" "$u2") s=$(faster "$s1" "$s2") c=$(faster "$c1" "$c2")
    b=$(faster "$b1" "$b2") v=$(faster "$v1" "$v2")
    x_all="$x_all $x" u_all="$u_all $u" s_all="$s_all $s" c_all="$c_all $c" b_all="$b_all $b" v_all="$v_all $v"
    ratios="$ratios $(per "$x" "$c")" uratios="$uratios $(per "$u" "$c")" sratios="$sratios $(per "$s" "$c")"
    bratios="$bratios $(per "$b" "$v")"
done
x_ms=$(echo "$x_all" | median)
u_ms=$(echo "$u_all" | median)
s_ms=$(echo "$s_all" | median)
c_ms=$(echo "$c_all" | median)
ratio=$(echo "$ratios" | median)
uratio=$(echo "$uratios" | median)
sratio=$(echo "$sratios" | median)
lo_hi=$(echo "$ratios" | range)
s_lo_hi=$(echo "$sratios" | range)
b_ms=$(echo "$b_all" | median)
v_ms=$(echo "$v_all" | median)
bratio=$(echo "$bratios" | median)
b_lo_hi=$(echo "$bratios" | range)

summary=$(awk -v n="$n" -v r="$rounds" -v x="$x_ms" -v u="$u_ms" -v s="$s_ms" -v c="$c_ms" -v q="$ratio" \
              -v uq="$uratio" -v sq="$sratio" -v lh="$lo_hi" -v slh="$s_lo_hi" -v b="$b_ms" -v v="$v_ms" \
              -v bq="$bratio" -v blh="$b_lo_hi" 'BEGIN {
    printf "bench: %d connections (medians of %d rounds): xqp %.1f ms (%.0f conn/s), UCX_XQP_SHARE=n %.1f ms, cmtime %.1f ms (%.0f conn/s), ratio %.2f (range %s; goal <= 1.0, %s), unshared %.2f (goal: shared <= unshared, %s); with cmtime'"'"'s 1-entry send queue (UCX_XQP_TX_QUEUE_LEN=1) %.1f ms, ratio %.2f (range %s); both sides %d endpoints to each other: sharing %.1f ms, UCX_XQP_SHARE=n %.1f ms, shared/unshared %.2f (range %s)\n",
           n, r, x, n / (x / 1000), u, c, n / (c / 1000), q, lh, (q <= 1.0) ? "met" : "not met",
           uq, (q <= uq) ? "met" : "not met", s, sq, slh, n, b, v, bq, blh }')
echo "$summary"
[ -n "${WORK:-}" ] && echo "$summary" >> "$WORK/bench.txt"
echo "bench: wireup-vs-cmtime.sh took $SECONDS s"
exit 0
