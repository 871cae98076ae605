#!/bin/sh
# demo.sh XQP_RUN - what the README's first command shows: the xqp transport
# in 'ucx_info -d', then a ucx_perftest latency and bandwidth run over it.
set -e
[ $# = 1 ] || { echo "usage: $0 PATH/xqp-run" >&2; exit 2; }
run=$1
here=$(dirname "$0")
"$here/show-xqp.sh" "$run"
dev=$("$run" ucx_info -d | awk '/Transport: xqp/ { getline; print $3; exit }')
[ -n "$dev" ] || { echo "no xqp device" >&2; exit 1; }
for t in "put_lat -s 8 -D short" "put_bw -s 65536 -D zcopy"; do
    port=$((20000 + $$ % 10000))
    UCX_WARN_UNUSED_ENV_VARS=n "$run" ucx_perftest -p "$port" > /dev/null 2>&1 &
    server=$!
    sleep 2
    echo "== ucx_perftest -x xqp -d $dev -t $t"
    # shellcheck disable=SC2086
    UCX_WARN_UNUSED_ENV_VARS=n "$run" ucx_perftest 127.0.0.1 -p "$port" -x xqp -d "$dev" \
        -t $t -n 2000 | grep -E '^\| *(Test|Message|Data)|Stage|^Final'
    wait "$server"
done
