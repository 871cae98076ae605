#!/bin/bash
# cost.sh XQP_RUN DEVICE OUTDIR
#
# The cost table (#18): user-space instructions per call of each data-path
# operation, xqp against UCX's rc_verbs, counted by callgrind in one run on
# the same device. Instruction counts are exact and repeatable, unlike time,
# so a few iterations suffice. Goal: xqp <= 0.90 x rc_verbs on every row.
#
# Method. Per transport, ucx_perftest runs twice with its client under
# `valgrind --tool=callgrind` (everything collected, no warm-up iterations)
# and its server native: once am_lat 8 B short, once a batch file (-b, the
# same file on both sides) with the other tests. Every count comes from
# callgrind's call arcs: the "calls=" line of an arc gives how many calls
# it made, the line after it their inclusive cost. Summed over all arcs into
# a function, that is its inclusive cost and its call count: the figure
# `--toggle-collect=FUNC` gives, divided by the calls callgrind counted
# rather than by perftest's iterations. The functions, the same for both:
#
#   put_short 8 B, put_bcopy 256 B, put_zcopy 64 KiB, get_zcopy 64 KiB,
#   am_short 8 B, am_bcopy 256 B, am_zcopy 4 KiB, atomic fetch-add 64 bit:
#       the transport's uct_ep_* entry point (xqp::ep::ep_put_short...,
#       uct_rc_verbs_ep_put_short...; fetch-add: ep_atomic64_fetch and
#       uct_rc_verbs_ep_atomic64_fetch), per call. bcopy rows include
#       perftest's pack callback, which is the same code for both. am_zcopy
#       is 4 KiB because rc_verbs takes at most one segment (8 KiB).
#       One-time work of a fresh interface is left out, the same way for
#       both: the client runs with LD_BIND_NOW=1 (no lazy symbol binding on
#       first calls), and a memory pool's first growth called directly from
#       the entry point (ucs_mpool_get_grow: rc_verbs' bounce buffers,
#       about 100000 instructions once) is subtracted; growth deeper in the
#       call tree would stay in.
#   empty progress: the transport's progress callback, the function the
#       worker's progress calls: xqp::iface::iface_progress; for rc_verbs
#       uct_rc_verbs_iface_progress, which is static in a stripped library,
#       so callgrind names it by its address: it is found as the function of
#       libuct_ib that ucx_perftest calls most often (printed). A call that
#       finds nothing always runs the same instructions; the lowest average
#       per call over the function's call sites is that cost (perftest's
#       barriers poll while nothing can arrive: a site with empty calls only;
#       the site's call count is printed).
#   progress reaping one completion: fetch-add runs one request at a time
#       and nothing else: each request's send completion is reaped by one
#       progress call, between empty ones. From the arcs of the test loop
#       (the function that calls the fetch-add entry point) into the progress
#       callback, with C calls costing I and N requests (the entry point's
#       calls): (I - (C - N) x empty) / N. Includes perftest's completion
#       callback (same code).
#   AM receive, from the CQE to the handler and back: the same in the
#       am_lat run (each progress call that finds the peer's message reaps
#       exactly one receive), minus the handler's own inclusive cost
#       (perftest's, called from the transport's library):
#       (I - (C - N) x empty - handler) / N, N = handler calls. The
#       am_short send completions (one in a few dozen sends, as each
#       transport moderates them) are reaped in the same loop and add to
#       this row for both.
# Rows that cannot be measured print "?" with the reason on stderr.
#
# Writes OUTDIR/cost.tsv and keeps the callgrind files in OUTDIR/callgrind/
# (callgrind_annotate --inclusive=yes FILE shows where the instructions go).
# Takes about 3-5 minutes in the testbed. It reports; it fails only when
# valgrind is missing.
set -u
. "$(dirname "$0")/lib.sh"
run=$1 dev=$2 out=${3:-.}
command -v valgrind > /dev/null || { echo "bench: cost table skipped: no valgrind"; exit 0; }
cg=$out/callgrind
mkdir -p "$cg"
tmp=$(mktemp -d /tmp/xqp-cost.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

wait_listen() {
    for _ in $(seq 30); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        sleep 0.05
    done
}

# the tests of the batch run: name and ucx_perftest options
cat > "$tmp/batch" <<'EOF'
put_short -t put_lat -s 8 -D short -n 100 -w 0
put_bcopy -t put_bw -s 256 -D bcopy -n 100 -w 0
put_zcopy -t put_bw -s 65536 -D zcopy -n 30 -w 0
get_zcopy -t get -s 65536 -D zcopy -n 30 -w 0
am_bcopy -t am_lat -s 256 -D bcopy -n 50 -w 0
am_zcopy -t am_lat -s 4096 -D zcopy -n 50 -w 0
fadd -t fadd -s 8 -D short -n 100 -w 0
EOF

# profile TL NAME ARGS...: ucx_perftest's client under callgrind -> $cg/TL-NAME.out
profile() {
    local tl=$1 name=$2 port=$((20000 + RANDOM % 10000))
    shift 2
    UCX_WARN_UNUSED_ENV_VARS=n "$run" ucx_perftest -p "$port" -x "$tl" -d "$dev:1" "$@" \
        > "$tmp/s" 2>&1 &
    local server=$!
    wait_listen "$port"
    UCX_WARN_UNUSED_ENV_VARS=n LD_BIND_NOW=1 timeout 600 "$run" valgrind --tool=callgrind \
        --compress-strings=no --compress-pos=no --callgrind-out-file="$cg/$tl-$name.out" \
        ucx_perftest 127.0.0.1 -p "$port" -x "$tl" -d "$dev:1" "$@" > "$tmp/c" 2>&1
    local rc=$?
    wait "$server"
    [ "$rc" = 0 ] || { echo "bench: cost: $tl $name failed:" >&2; tail -n 5 "$tmp/c" >&2; return 1; }
}

# arcs FILE -> "caller_ob TAB caller_fn TAB callee_ob TAB callee_fn TAB calls TAB inclusive",
# summed over the call sites of each caller
arcs() {
    awk '/^ob=/ { ob = substr($0, 4); next }
         /^fn=/ { fn = substr($0, 4); cob = ob; next }
         /^cob=/ { cob = substr($0, 5); next }
         /^cfn=/ { cfn = substr($0, 5); next }
         /^calls=/ { split(substr($0, 7), a, " "); n = a[1]
                     getline; k = ob SUBSEP fn SUBSEP cob SUBSEP cfn
                     c[k] += n; s[k] += $NF; cob = ob; next }
         END { for (k in c) { split(k, p, SUBSEP)
                              printf "%s\t%s\t%s\t%s\t%d\t%d\n", p[1], p[2], p[3], p[4], c[k], s[k] } }' "$1"
}

# per TL: the library's object pattern, the entry points, the progress callback
lib_of() { case $1 in xqp) echo 'libuct_xqp' ;; *) echo 'libuct_ib' ;; esac; }
op_of() {
    case $1 in
    xqp) case $2 in fadd) echo 'xqp::ep::ep_atomic64_fetch(' ;; *) echo "xqp::ep::ep_$2(" ;; esac ;;
    *)   case $2 in fadd) echo 'uct_rc_verbs_ep_atomic64_fetch' ;; *) echo "uct_rc_verbs_ep_$2" ;; esac ;;
    esac
}

# per-call figures of TL into $tmp/TL.res ("row value" lines)
measure() {
    local tl=$1 lib op a=$tmp/$1.a b=$tmp/$1.b prog
    lib=$(lib_of "$tl")
    : > "$tmp/$tl.res"
    profile "$tl" am_lat -t am_lat -s 8 -D short -n 100 -w 0 && arcs "$cg/$tl-am_lat.out" > "$a" || : > "$a"
    profile "$tl" batch -b "$tmp/batch" && arcs "$cg/$tl-batch.out" > "$b" || : > "$b"
    # the progress callback: named for xqp; for rc_verbs the libuct_ib
    # function ucx_perftest calls most often
    if [ "$tl" = xqp ]; then
        prog='xqp::iface::iface_progress(uct_iface*)'
    else
        prog=$(awk -F'\t' -v lib="$lib" '$1 ~ /ucx_perftest/ && $3 ~ lib && $4 ~ /^0x/ { c[$4] += $5 }
            END { for (f in c) if (c[f] > best) { best = c[f]; b = f }; print b }' "$a")
        echo "bench: cost: rc_verbs progress callback: $prog in libuct_ib (stripped)" >&2
    fi
    # entry points: inclusive / calls over all arcs into them
    for row in put_short put_bcopy put_zcopy get_zcopy am_short am_bcopy am_zcopy fadd; do
        op=$(op_of "$tl" "$row")
        cat "$a" "$b" | awk -F'\t' -v op="$op" -v row="$row" '
            function is(f) { return index(f, op) == 1 && (length(f) == length(op) || substr(op, length(op)) == "(") }
            is($4) { c += $5; s += $6 }
            is($2) && $4 ~ /mpool_get_grow|::grow\(/ { s -= $6 }
            END { if (c > 0) printf "%s %.0f\n", row, s / c; else printf "%s ?\n", row }' >> "$tmp/$tl.res"
    done
    # empty progress: the lowest average over the call sites (both runs)
    cat "$a" "$b" | awk -F'\t' -v p="$prog" -v row=progress_empty '
        $4 == p && $5 > 0 { v = $6 / $5; if (!n++ || v < m) { m = v; c = $5 } }
        END { if (n) { printf "%s %.0f\n", row, m; printf "sites %d, lowest over %d calls\n", n, c > "/dev/stderr" }
              else printf "%s ?\n", row }' 2> "$tmp/$tl.empty" >> "$tmp/$tl.res"
    echo "bench: cost: $tl empty progress: $(cat "$tmp/$tl.empty")" >&2
    local e
    e=$(awk '$1 == "progress_empty" { print $2 }' "$tmp/$tl.res")
    # reaping one send completion: the fetch-add loop
    awk -F'\t' -v p="$prog" -v op="$(op_of "$tl" fadd)" -v e="$e" -v lib="$lib" '
        index($4, op) == 1 && $3 ~ lib { loop[$2] = 1; n += $5 }
        { arc[NR] = $0 }
        END {
            for (i = 1; i <= NR; ++i) { split(arc[i], f, "\t")
                if ((f[2] in loop) && f[4] == p) { c += f[5]; s += f[6] } }
            if (n > 0 && c >= n && e != "?") printf "progress_reap %.0f\n", (s - (c - n) * e) / n
            else print "progress_reap ?"
            printf "fadd loop: %d progress calls, %d requests\n", c, n > "/dev/stderr"
        }' "$b" 2> "$tmp/$tl.reap" >> "$tmp/$tl.res"
    echo "bench: cost: $tl $(cat "$tmp/$tl.reap")" >&2
    # AM receive: the am_lat loop, less the handler (arcs from the
    # transport's library into ucx_perftest)
    awk -F'\t' -v p="$prog" -v op="$(op_of "$tl" am_short)" -v e="$e" -v lib="$lib" '
        index($4, op) == 1 && $3 ~ lib { loop[$2] = 1 }
        $1 ~ lib && $3 ~ /ucx_perftest/ { n += $5; h += $6 }
        { arc[NR] = $0 }
        END {
            for (i = 1; i <= NR; ++i) { split(arc[i], f, "\t")
                if ((f[2] in loop) && f[4] == p) { c += f[5]; s += f[6] } }
            if (n > 0 && c >= n && e != "?") printf "am_recv %.0f\n", (s - (c - n) * e - h) / n
            else print "am_recv ?"
            printf "am_lat loop: %d progress calls, %d messages handled (handler %d instructions in all)\n", c, n, h > "/dev/stderr"
        }' "$a" 2> "$tmp/$tl.recv" >> "$tmp/$tl.res"
    echo "bench: cost: $tl $(cat "$tmp/$tl.recv")" >&2
}

measure xqp
measure rc_verbs

label() {
    case $1 in
    put_short) echo "put_short 8 B" ;;
    put_bcopy) echo "put_bcopy 256 B" ;;
    put_zcopy) echo "put_zcopy 64 KiB" ;;
    get_zcopy) echo "get_zcopy 64 KiB" ;;
    am_short) echo "am_short 8 B" ;;
    am_bcopy) echo "am_bcopy 256 B" ;;
    am_zcopy) echo "am_zcopy 4 KiB" ;;
    fadd) echo "atomic fetch-add 64" ;;
    progress_empty) echo "progress, nothing to poll" ;;
    progress_reap) echo "progress reaping 1 completion" ;;
    am_recv) echo "AM receive (CQE to handler and back)" ;;
    esac
}
{
    printf 'operation\txqp\trc_verbs\txqp/rc_verbs\tgoal\tmet\n'
    for row in put_short put_bcopy put_zcopy get_zcopy am_short am_bcopy am_zcopy fadd \
               progress_empty progress_reap am_recv; do
        x=$(awk -v r="$row" '$1 == r { print $2 }' "$tmp/xqp.res")
        r=$(awk -v r="$row" '$1 == r { print $2 }' "$tmp/rc_verbs.res")
        awk -v l="$(label "$row")" -v x="${x:-?}" -v r="${r:-?}" 'BEGIN {
            if (x == "?" || r == "?" || r + 0 <= 0) { ratio = "?"; met = "?" }
            else { ratio = sprintf("%.2f", x / r); met = (x / r <= 0.90) ? "yes" : "no" }  # the exact ratio, not the rounded one
            printf "%s\t%s\t%s\t%s\t<= 0.90\t%s\n", l, x, r, ratio, met }'
    done
} > "$out/cost.tsv"
echo "bench: user-space instructions per call (callgrind, inclusive; contrib/bench/cost.sh says how):"
column -t -s $'\t' "$out/cost.tsv" | sed 's/^/bench: /'
echo "bench: cost.sh took $SECONDS s"
exit 0
