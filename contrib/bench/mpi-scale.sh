#!/bin/bash
# mpi-scale.sh XQP_RUN DEVICE PROG OUTDIR
#
# The connection-scale benchmark of issue #16: an Open MPI job of P ranks
# (XQP_BENCH_MPI_RANKS, default 4) on DEVICE makes its first all-to-all
# exchange (PROG, built from contrib/bench/mpi_connect.c), over xqp and over
# UCX's rc_verbs, in paired rounds (XQP_BENCH_MPI_ROUNDS, default 3: xqp,
# rc_verbs, rc_verbs, xqp; each side keeps its faster run of a round).
# Reports per transport the time from MPI_Init to "every pair exchanged"
# and the RC QPs each rank holds at the end (`rdma resource show qp`).
# Goals: no more QPs per rank than rc_verbs (one connection per pair of
# ranks), and the time <= 1.00 x rc_verbs'. Shared memory is left out
# (UCX_TLS names the transport, self for a rank's messages to itself), so
# that every pair goes through DEVICE.
# Writes OUTDIR/mpi-scale.tsv. Fails only when a run fails, never on speed.
set -u
. "$(dirname "$0")/lib.sh"
run=$1 dev=$2 prog=$3 out=$4
ranks=${XQP_BENCH_MPI_RANKS:-4}
rounds=${XQP_BENCH_MPI_ROUNDS:-3}
tmp=$(mktemp -d /tmp/xqp-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"

command -v mpirun > /dev/null || { echo "bench: no mpirun (openmpi-bin)"; exit 1; }
[ -x "$prog" ] || { echo "bench: no $prog (mpicc)"; exit 1; }

# mpi TRANSPORT -> prints "init_to_connected_ms qps_min qps_max"
mpi() {
    local tls env=()
    case $1 in
    xqp) tls=xqp,self ;;
    # rc_verbs on Soft-RoCE needs ud_verbs for UCP's wireup, and ud_verbs
    # rxe's GIDs without the destination check
    rc_verbs) tls=rc_verbs,ud_verbs,self env=(-x UCX_UD_VERBS_ETH_DGID_CHECK=n) ;;
    esac
    timeout 300 "$run" mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
        --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
        --mca btl '^vader,tcp,openib,uct' --mca osc '^ucx' \
        -x UCX_TLS="$tls" -x UCX_NET_DEVICES="$dev:1" -x UCX_WARN_UNUSED_ENV_VARS=n \
        "${env[@]}" "$prog" > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; return 1; }
    awk '/^mpi_connect / { for (i = 2; i < NF; ++i) v[$i] = $(i + 1)
                           print v["init_to_connected_ms"], v["qps_min"], v["qps_max"]; n++ }
         END { exit n != 1 }' "$tmp/out" || { cat "$tmp/out" >&2; return 1; }
}

x_all="" r_all="" ratios="" x_qps="" r_qps=""
for round in $(seq "$rounds"); do
    read -r x1 xlo xhi <<< "$(mpi xqp)" && [ -n "${x1:-}" ] || { echo "bench: MPI over xqp failed"; exit 1; }
    read -r r1 rlo rhi <<< "$(mpi rc_verbs)" && [ -n "${r1:-}" ] || { echo "bench: MPI over rc_verbs failed"; exit 1; }
    read -r r2 _ _ <<< "$(mpi rc_verbs)" && [ -n "${r2:-}" ] || { echo "bench: MPI over rc_verbs failed"; exit 1; }
    read -r x2 _ _ <<< "$(mpi xqp)" && [ -n "${x2:-}" ] || { echo "bench: MPI over xqp failed"; exit 1; }
    echo "bench: round $round, $ranks ranks (ms): xqp $x1 $x2 rc_verbs $r1 $r2; RC QPs per rank: xqp $xlo-$xhi rc_verbs $rlo-$rhi"
    read -r x r q <<< "$(awk -v a="$x1" -v b="$x2" -v c="$r1" -v d="$r2" 'BEGIN {
        x = (a < b) ? a : b; r = (c < d) ? c : d; printf "%.1f %.1f %.4f", x, r, x / r }')"
    x_all="$x_all $x" r_all="$r_all $r" ratios="$ratios $q"
    x_qps="$x_qps $xhi" r_qps="$r_qps $rhi"
done
x_ms=$(echo "$x_all" | median)
r_ms=$(echo "$r_all" | median)
ratio=$(echo "$ratios" | median)
lo_hi=$(echo "$ratios" | range)
xq=$(echo "$x_qps" | median)
rq=$(echo "$r_qps" | median)

printf "metric\txqp\trc_verbs\txqp/rc_verbs\tgoal\tmet\n" > "$out/mpi-scale.tsv"
awk -v p="$ranks" -v x="$x_ms" -v r="$r_ms" -v q="$ratio" -v xq="$xq" -v rq="$rq" 'BEGIN {
    printf "MPI_Init to all pairs connected, %d ranks (ms)\t%.1f\t%.1f\t%.2f\t<= 1.00\t%s\n",
           p, x, r, q, (q <= 1.00) ? "yes" : "no"
    printf "RC QPs per rank, %d ranks\t%d\t%d\t%.2f\t<= 1.00\t%s\n",
           p, xq, rq, xq / rq, (xq <= rq) ? "yes" : "no" }' >> "$out/mpi-scale.tsv"
echo "bench: Open MPI first all-to-all exchange, medians of $rounds rounds (xqp/rc_verbs range $lo_hi):"
column -t -s $'\t' "$out/mpi-scale.tsv" | sed 's/^/bench: /'
echo "bench: mpi-scale.sh took $SECONDS s"
exit 0
