#!/bin/bash
# datapath.sh XQP_RUN DEVICE OUTDIR
#
# The data-path benchmark, all in one run on the same device so the ratios
# compare like with like:
#   perftest ib_write_bw -R / ib_write_lat -R   (raw verbs over rdma_cm)
#   ucx_perftest -x rc_verbs                     (UCX's own RC transport)
#   ucx_perftest -x xqp                          (this plugin)
# Prints a table of latency (median) and bandwidth with ratios against rc_verbs and
# perftest, writes OUTDIR/datapath.tsv and, when gnuplot is there,
# OUTDIR/datapath.png; then counts user-space instructions per put_short and
# am_short with callgrind (inclusive instructions of the transport's function
# per call: deterministic, unlike time). Every timed figure is the median of
# XQP_BENCH_ROUNDS (default 3) rounds, xqp and its baselines alternating
# within each round. Goals: put_bw 64 KiB >= 1.00 x
# rc_verbs and >= 0.95 x ib_write_bw; put_lat/am_lat 8 B <= 1.00 x rc_verbs.
# It reports; it fails only when a measurement cannot be made.
set -u
. "$(dirname "$0")/median.sh"
run=$1 dev=$2 out=${3:-.}
mkdir -p "$out"
n=${XQP_BENCH_ITERS:-2000}
tmp=$(mktemp -d /tmp/xqp-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ip=${XQP_VM_IP:-127.0.0.1}
gid=${XQP_VM_GID_INDEX:-1}

fail() { echo "bench: $*"; exit 1; }

# ucx_perftest TL TEST SIZE MODE -> prints "latency_us bandwidth_MBs"
uct_perf() {
    local tl=$1 test=$2 size=$3 mode=$4 port=$((20000 + RANDOM % 10000))
    UCX_WARN_UNUSED_ENV_VARS=n "$run" ucx_perftest -p "$port" > "$tmp/s" 2>&1 &
    local server=$!
    sleep 1.5
    UCX_WARN_UNUSED_ENV_VARS=n "$run" ucx_perftest "127.0.0.1" -p "$port" -x "$tl" -d "$dev:1" \
        -t "$test" -s "$size" -D "$mode" -n "$n" > "$tmp/c" 2>&1
    local rc=$?
    wait "$server"
    [ "$rc" = 0 ] || { cat "$tmp/c" >&2; return 1; }
    # Final: iters 50%ile avg overall avg-bw overall-bw ...: the median
    # latency (robust to the emulator's stalls) and the overall bandwidth
    awk '/^Final:/ { print $3, $7 }' "$tmp/c"
}

# perftest: ib_write_lat / ib_write_bw over rdma_cm
ib_perf() {
    local prog=$1 size=$2
    "$prog" -d "$dev" -R -x "$gid" -s "$size" -n "$n" > "$tmp/ps" 2>&1 &
    local server=$!
    sleep 1.5
    "$prog" -d "$dev" -R -x "$gid" -s "$size" -n "$n" "$ip" > "$tmp/pc" 2>&1
    local rc=$?
    wait "$server"
    [ "$rc" = 0 ] || { cat "$tmp/pc" >&2; return 1; }
    if [ "$prog" = ib_write_lat ]; then
        # #bytes #iterations t_min t_max t_typical t_avg ...: the typical
        # (median) latency, as for ucx_perftest
        awk -v s="$size" '$1 == s && NF >= 6 { print $5 }' "$tmp/pc" | tail -n 1
    else
        # #bytes #iterations BW peak BW average[MB/sec] ...
        awk -v s="$size" '$1 == s && NF >= 4 { printf "%.2f\n", $4 * 1.048576 }' "$tmp/pc" | tail -n 1
    fi
}

# warm-up: under emulation the first runs in a fresh guest are slow (code
# translation, page faults); they are not measured
saved_n=$n
n=300
uct_perf rc_verbs put_lat 8 short > /dev/null
uct_perf xqp put_lat 8 short > /dev/null
n=$saved_n


declare -A all
# name transport test size mode field (1: median latency, 2: bandwidth)
measures=("x_put_lat xqp put_lat 8 short 1" "r_put_lat rc_verbs put_lat 8 short 1"
          "x_am_lat xqp am_lat 8 short 1" "r_am_lat rc_verbs am_lat 8 short 1"
          "x_put_bw xqp put_bw 65536 zcopy 2" "r_put_bw rc_verbs put_bw 65536 zcopy 2")
rounds=${XQP_BENCH_ROUNDS:-3}
for _ in $(seq "$rounds"); do
    for m in "${measures[@]}"; do
        read -r key tl test size mode field <<< "$m"
        r=$(uct_perf "$tl" "$test" "$size" "$mode") || fail "$tl $test"
        all[$key]+=" $(echo "$r" | awk -v f="$field" '{ print $f }')"
    done
    v=$(ib_perf ib_write_lat 8) || fail "ib_write_lat"
    all[p_lat]+=" $v"
    v=$(ib_perf ib_write_bw 65536) || fail "ib_write_bw"
    all[p_bw]+=" $v"
done
for k in x_put_lat r_put_lat x_am_lat r_am_lat x_put_bw r_put_bw p_lat p_bw; do
    echo "bench: rounds $k:${all[$k]}"
    printf -v "$k" '%s' "$(echo "${all[$k]}" | median)"
done

{
    printf 'metric\txqp\trc_verbs\tperftest\txqp/rc_verbs\txqp/perftest\tgoal\n'
    awk -v x="$x_put_lat" -v r="$r_put_lat" -v p="$p_lat" 'BEGIN {
        printf "put_lat 8 B (us)\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t<= 1.00 x rc_verbs\n", x, r, p, x / r, x / p }'
    awk -v x="$x_am_lat" -v r="$r_am_lat" 'BEGIN {
        printf "am_lat 8 B (us)\t%.2f\t%.2f\t-\t%.2f\t-\t<= 1.00 x rc_verbs\n", x, r, x / r }'
    awk -v x="$x_put_bw" -v r="$r_put_bw" -v p="$p_bw" 'BEGIN {
        printf "put_bw 64 KiB (MB/s)\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t>= 1.00 x rc_verbs, >= 0.95 x perftest\n", x, r, p, x / r, x / p }'
} > "$out/datapath.tsv"
column -t -s $'\t' "$out/datapath.tsv" | sed 's/^/bench: /'

if command -v gnuplot > /dev/null; then
    gnuplot <<GP 2> /dev/null && echo "bench: plot $out/datapath.png"
set terminal png size 900,400
set output "$out/datapath.png"
set style data histograms
set style fill solid 0.8
set ylabel "ratio (xqp / baseline)"
set yrange [0:*]
set title "xqp data path vs baselines (same testbed run)"
set datafile separator "\t"
plot "$out/datapath.tsv" using 5:xtic(1) title "xqp / rc_verbs", "" using (\$6 eq "-" ? 1/0 : \$6) title "xqp / perftest"
GP
fi

# instructions per call, inclusive in the transport's put_short / am_short
instr() {
    local tl=$1 test=$2 func=$3 port=$((20000 + RANDOM % 10000)) iters=200
    UCX_WARN_UNUSED_ENV_VARS=n "$run" ucx_perftest -p "$port" > "$tmp/s" 2>&1 &
    local server=$!
    sleep 1.5
    UCX_WARN_UNUSED_ENV_VARS=n "$run" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" \
        --toggle-collect="$func" ucx_perftest 127.0.0.1 -p "$port" -x "$tl" -d "$dev:1" \
        -t "$test" -s 8 -D short -n "$iters" -w 0 > "$tmp/c" 2>&1
    local rc=$?
    wait "$server"
    [ "$rc" = 0 ] || { tail -n 5 "$tmp/c" >&2; return 1; }
    awk -v n="$iters" '/^summary:/ { printf "%.0f\n", $2 / n }' "$tmp/cg"
}
if command -v valgrind > /dev/null; then
    for t in "put_lat put_short" "am_lat am_short"; do
        set -- $t
        x=$(instr xqp "$1" "xqp::ep::ep_$2*") || x=?
        r=$(instr rc_verbs "$1" "uct_rc_verbs_ep_$2") || r=?
        echo "bench: instructions per $2 (callgrind, inclusive): xqp $x, rc_verbs $r"
        printf 'instructions per %s\t%s\t%s\t-\t-\t-\t-\n' "$2" "$x" "$r" >> "$out/datapath.tsv"
    done
fi
exit 0
