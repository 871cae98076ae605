#!/bin/bash
# datapath.sh XQP_RUN DEVICE OUTDIR
#
# The data-path benchmark, all in one run on the same device so the ratios
# compare like with like:
#   perftest ib_write_bw -R / ib_write_lat -R   (raw verbs over rdma_cm)
#   ucx_perftest -x rc_verbs                     (UCX's own RC transport)
#   ucx_perftest -x xqp                          (this plugin)
#   ucx_perftest UCP, UCX_TLS=xqp,self and rc_verbs,ud_verbs,self
# Goals: put_bw 64 KiB >= 1.00 x rc_verbs and >= 0.95 x ib_write_bw;
# put_lat/am_lat 8 B <= 1.00 x rc_verbs; message rate (#18 item 3) of UCT
# put_bw and am_bw 8 B and of UCP tag_bw 8 B >= 1.00 x rc_verbs.
#
# Method. Under emulation one run differs from the next by several percent
# and the host's load drifts, so every comparison is paired and repeated:
# XQP_BENCH_ROUNDS rounds (default 9); in each round every metric runs
# xqp, rc_verbs, perftest, perftest, rc_verbs, xqp (the order cancels a drift
# within the round), each side keeps the better of its two runs (a stall
# only ever slows a run down) and the round's ratios are taken from those.
# The table shows the medians over the rounds, of each side and of the
# ratios, and the ratios' range. Latency is the average over the run (the
# median per iteration is rounded to the 0.5 us the emulated clock
# resolves); bandwidth is the run's overall bandwidth. Both tools' "MB/s"
# are MiB/s (2^20 bytes) and are compared as printed. The message-rate rows
# are paired the same way, in rounds of their own after the others
# (XQP_BENCH_MR_ROUNDS, default 5; 0 leaves them out, as XQP_BENCH_ROUNDS=0
# leaves out the others) of XQP_BENCH_MR_ITERS messages a run (default
# 20000, a few seconds a run under emulation); the figure is the run's
# overall message rate (msg/s, the last column of perftest's "Final:"
# line). UCP's rc_verbs needs ud_verbs for its wireup on Soft-RoCE, and
# UCX_UD_VERBS_ETH_DGID_CHECK=n for rxe's GIDs; its tag lane is rc_verbs.
#
# Writes OUTDIR/datapath.tsv and, when gnuplot is there, OUTDIR/datapath.png.
# (Instructions per call, counted with callgrind, are cost.sh's table.) It
# reports; it fails only when a measurement cannot be made.
set -u
. "$(dirname "$0")/lib.sh"
run=$1 dev=$2 out=${3:-.}
mkdir -p "$out"
n=${XQP_BENCH_ITERS:-2000}          # bandwidth iterations
n_lat=${XQP_BENCH_LAT_ITERS:-20000} # latency iterations (about 0.4 s a run)
rounds=${XQP_BENCH_ROUNDS:-9}
n_mr=${XQP_BENCH_MR_ITERS:-20000}   # message-rate iterations
mr_rounds=${XQP_BENCH_MR_ROUNDS:-5}
# the server and the client of every tool run pinned to these CPUs ("SERVER
# CLIENT"): the spinning receiver then never shares a CPU with the sender
# (the guest's scheduler otherwise sometimes places them together for a
# while). Default: the last two online CPUs; "" pins nothing.
if [ -z "${XQP_BENCH_CPUS+set}" ] && command -v taskset > /dev/null; then
    XQP_BENCH_CPUS=$(awk '/^processor/ { c[n++] = $3 } END { if (n >= 2) print c[n - 1], c[n - 2] }' /proc/cpuinfo)
fi
read -r cpu_s cpu_c <<< "${XQP_BENCH_CPUS:-}"
pin_s=() pin_c=()
if [ -n "${cpu_c:-}" ]; then
    pin_s=(taskset -c "$cpu_s") pin_c=(taskset -c "$cpu_c")
fi
tmp=$(mktemp -d /tmp/xqp-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
gid=${XQP_VM_GID_INDEX:-1}

fail() { echo "bench: $*"; exit 1; }
ip=$(device_ip "$dev")
[ -n "$ip" ] || fail "no IPv4 address on $dev"

# wait_listen PORT: until a TCP listener is on PORT (ucx_perftest's server),
# 1.5 s at most
wait_listen() {
    for _ in $(seq 30); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.05
    done
}

# ucx_perftest TL TEST SIZE MODE [ITERS] -> prints "latency_us
# bandwidth_MiBs msg_per_s"
uct_perf() {
    local tl=$1 test=$2 size=$3 mode=$4 port=$((20000 + RANDOM % 10000))
    local iters=$n
    case $test in *_lat) iters=$n_lat ;; esac
    iters=${5:-$iters}
    # the server names the transport too (UCX >= 1.22 requires it)
    UCX_WARN_UNUSED_ENV_VARS=n "${pin_s[@]}" "$run" ucx_perftest -p "$port" -x "$tl" -d "$dev:1" > "$tmp/s" 2>&1 &
    local server=$!
    wait_listen "$port"
    UCX_WARN_UNUSED_ENV_VARS=n timeout 300 "${pin_c[@]}" "$run" ucx_perftest "127.0.0.1" -p "$port" -x "$tl" \
        -d "$dev:1" -t "$test" -s "$size" -D "$mode" -n "$iters" > "$tmp/c" 2>&1
    local rc=$?
    wait "$server"
    [ "$rc" = 0 ] || { cat "$tmp/c" >&2; return 1; }
    # Final: iters typical-lat avg-lat overall-lat avg-bw overall-bw
    #        avg-mr overall-mr
    awk '/^Final:/ { print $5, $7, $9 }' "$tmp/c"
}

# ucx_perftest at the UCP level over TLS (UCX_TLS), TEST SIZE, n_mr
# iterations -> prints "latency_us bandwidth_MiBs msg_per_s"
ucp_perf() {
    local tls=$1 test=$2 size=$3 port=$((20000 + RANDOM % 10000))
    local env=(UCX_TLS="$tls" UCX_NET_DEVICES="$dev:1" UCX_WARN_UNUSED_ENV_VARS=n)
    case $tls in *ud_verbs*) env+=(UCX_UD_VERBS_ETH_DGID_CHECK=n) ;; esac
    env "${env[@]}" "${pin_s[@]}" "$run" ucx_perftest -p "$port" > "$tmp/s" 2>&1 &
    local server=$!
    wait_listen "$port"
    env "${env[@]}" timeout 300 "${pin_c[@]}" "$run" ucx_perftest "127.0.0.1" -p "$port" \
        -t "$test" -s "$size" -n "$n_mr" > "$tmp/c" 2>&1
    local rc=$?
    wait "$server"
    [ "$rc" = 0 ] || { cat "$tmp/c" >&2; return 1; }
    awk '/^Final:/ { print $5, $7, $9 }' "$tmp/c"
}

# perftest PROG SIZE over rdma_cm -> prints the average latency (us) or the
# average bandwidth (MiB/s). perftest calibrates its cycle counter at the end
# of a run and gives up when the samples scatter ("Correlation coefficient
# r^2 ... < 0.9", which a loaded emulator sometimes causes): such a run is
# repeated, up to 3 times; any other failure is final.
ib_perf() {
    local prog=$1 size=$2 iters=$n attempt f=6 v
    [ "$prog" = ib_write_lat ] && iters=$n_lat
    # ib_write_lat: #bytes #iterations t_min t_max t_typical t_avg ...
    # ib_write_bw:  #bytes #iterations BW-peak BW-average ...
    [ "$prog" = ib_write_bw ] && f=4
    for attempt in 1 2 3; do
        timeout 300 "${pin_s[@]}" "$prog" -d "$dev" -R -x "$gid" -s "$size" -n "$iters" > "$tmp/ps" 2>&1 &
        local server=$!
        sleep 1.5 # an rdma_cm listener: no ss to wait for it
        timeout 300 "${pin_c[@]}" "$prog" -d "$dev" -R -x "$gid" -s "$size" -n "$iters" "$ip" > "$tmp/pc" 2>&1
        wait "$server"
        v=$(awk -v s="$size" -v f="$f" '$1 == s && NF >= f { print $f }' "$tmp/pc" | tail -n 1)
        if [ -n "$v" ]; then
            echo "$v"
            return 0
        fi
        if ! grep -q "Correlation coefficient" "$tmp/pc" "$tmp/ps" || [ "$attempt" = 3 ]; then
            cat "$tmp/pc" >&2
            return 1
        fi
        echo "bench: $prog could not calibrate its clock (attempt $attempt), again" >&2
    done
}

# measure SPEC: "uct TL TEST SIZE MODE FIELD" (FIELD 1 latency, 2 bandwidth,
# 3 message rate: n_mr iterations), "ucp TLS TEST SIZE FIELD" or
# "ib PROG SIZE"
measure() {
    local v iters=
    case $1 in
    uct) [ "$6" = 3 ] && iters=$n_mr
         v=$(uct_perf "$2" "$3" "$4" "$5" "$iters") || return 1
         echo "$v" | awk -v f="$6" '{ print $f }' ;;
    ucp) v=$(ucp_perf "$2" "$3" "$4") || return 1
         echo "$v" | awk -v f="$5" '{ print $f }' ;;
    ib)  ib_perf "$2" "$3" ;;
    esac
}

# warm-up: under emulation the first runs in a fresh guest are slow (code
# translation, page faults); they are not measured
saved_n=$n_lat
n_lat=300
uct_perf rc_verbs put_lat 8 short > /dev/null
uct_perf xqp put_lat 8 short > /dev/null
n_lat=$saved_n

# name|better|xqp|rc_verbs|perftest (- for none)
metrics=("put_lat|low|uct xqp put_lat 8 short 1|uct rc_verbs put_lat 8 short 1|ib ib_write_lat 8"
         "am_lat|low|uct xqp am_lat 8 short 1|uct rc_verbs am_lat 8 short 1|-"
         "put_bw|high|uct xqp put_bw 65536 zcopy 2|uct rc_verbs put_bw 65536 zcopy 2|ib ib_write_bw 65536")
mr_metrics=("put_mr|high|uct xqp put_bw 8 short 3|uct rc_verbs put_bw 8 short 3|-"
            "am_mr|high|uct xqp am_bw 8 short 3|uct rc_verbs am_bw 8 short 3|-"
            "tag_mr|high|ucp xqp,self tag_bw 8 3|ucp rc_verbs,ud_verbs,self tag_bw 8 3|-")
declare -A all best
# paired ROUNDS METRIC...: the rounds of those metrics, into all[]
paired() {
    local rounds=$1 round m name better xs rs ps order side spec v lo pick
    shift
    for round in $(seq "$rounds"); do
        for m in "$@"; do
            IFS='|' read -r name better xs rs ps <<< "$m"
            order=(x r p p r x)
            [ "$ps" = - ] && order=(x r r x)
            declare -A got=()
            for side in "${order[@]}"; do
                case $side in x) spec=$xs ;; r) spec=$rs ;; p) spec=$ps ;; esac
                # shellcheck disable=SC2086
                v=$(measure $spec) || fail "$name: $spec"
                [ -n "$v" ] || fail "$name: $spec printed no result"
                got[$side]+=" $v"
            done
            pick='{ b = $1; for (i = 2; i <= NF; ++i) if (lo ? ($i < b) : ($i > b)) b = $i; print b }'
            lo=0
            [ "$better" = low ] && lo=1
            for side in x r p; do
                [ -n "${got[$side]:-}" ] || continue
                best[$side]=$(echo "${got[$side]}" | awk -v lo="$lo" "$pick")
                all[$name.$side]+=" ${best[$side]}"
            done
            all[$name.xr]+=" $(awk -v a="${best[x]}" -v b="${best[r]}" 'BEGIN { printf "%.4f", a / b }')"
            [ -n "${got[p]:-}" ] && all[$name.xp]+=" $(awk -v a="${best[x]}" -v b="${best[p]}" 'BEGIN { printf "%.4f", a / b }')"
            echo "bench: round $round $name: xqp${got[x]} rc_verbs${got[r]}${got[p]:+ perftest${got[p]}}"
            unset got
        done
    done
}
paired "$rounds" "${metrics[@]}"
if [ "$mr_rounds" -gt 0 ]; then
    # UCP's first runs in this guest are not measured either
    saved_n=$n_mr
    n_mr=300
    ucp_perf xqp,self tag_bw 8 > /dev/null
    ucp_perf rc_verbs,ud_verbs,self tag_bw 8 > /dev/null
    n_mr=$saved_n
    paired "$mr_rounds" "${mr_metrics[@]}"
fi

# row NAME LABEL GOAL_RC GOAL_PERFTEST: a table row; goals "<= 1.00" or ">= 0.95"
# (none when NAME was not measured: 0 rounds); msg/s are shown as integers
row() {
    local name=$1 label=$2 grc=$3 gp=$4 x r p xr xp rxr rxp
    [ -n "${all[$name.x]:-}" ] || return 0
    x=$(echo "${all[$name.x]}" | median)
    r=$(echo "${all[$name.r]}" | median)
    case $label in *msg/s*) x=${x%.*} r=${r%.*} ;; esac
    xr=$(echo "${all[$name.xr]}" | median)
    rxr=$(echo "${all[$name.xr]}" | range)
    p=- xp=- rxp=-
    if [ -n "${all[$name.p]:-}" ]; then
        p=$(echo "${all[$name.p]}" | median)
        xp=$(echo "${all[$name.xp]}" | median)
        rxp=$(echo "${all[$name.xp]}" | range)
    fi
    # met: the printed median ratio against the printed goal
    met=$(awk -v xr="$xr" -v xp="$xp" -v grc="$grc" -v gp="$gp" '
        function ok(v, g,    op, lim) {
            if (g == "") return 1
            split(g, a, " "); op = a[1]; lim = a[2] + 0
            return (op == "<=") ? (v + 0 <= lim) : (v + 0 >= lim)
        }
        BEGIN { print (ok(xr, grc) && (xp == "-" || ok(xp, gp))) ? "yes" : "no" }')
    goal="$grc x rc_verbs${gp:+, $gp x perftest}"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$x" "$r" "$p" "$xr" "$xp" \
        "$goal" "$met" "$rxr" "$rxp"
}
{
    printf 'metric\txqp\trc_verbs\tperftest\txqp/rc_verbs\txqp/perftest\tgoal\tmet\txqp/rc_verbs range\txqp/perftest range\n'
    row put_lat "put_lat 8 B (us)" "<= 1.00" ""
    row am_lat "am_lat 8 B (us)" "<= 1.00" ""
    row put_bw "put_bw 64 KiB (MiB/s)" ">= 1.00" ">= 0.95"
    row put_mr "put_bw 8 B (msg/s)" ">= 1.00" ""
    row am_mr "am_bw 8 B (msg/s)" ">= 1.00" ""
    row tag_mr "UCP tag_bw 8 B (msg/s)" ">= 1.00" ""
} > "$out/datapath.tsv"
echo "bench: medians over $rounds rounds, the msg/s rows over $mr_rounds${cpu_c:+, servers on CPU $cpu_s and clients on CPU $cpu_c} (each side the better of 2 runs per round):"
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

echo "bench: datapath.sh took $SECONDS s"
exit 0
