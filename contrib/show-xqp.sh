#!/bin/sh
# show-xqp.sh XQP_RUN - print the xqp memory domains and transports that
# 'ucx_info -d' reports with the plugin loaded; exit 1 when there are none.
[ $# = 1 ] || { echo "usage: $0 PATH/xqp-run" >&2; exit 2; }
"$1" ucx_info -d | awk '
    /^# Memory domain:/ { md = $0; show = 0; next }
    /^#     Component:/ { show = ($3 == "xqp"); if (show) { print md; found = 1 } }
    show
    END { if (!found) { print "no xqp transport found" > "/dev/stderr"; exit 1 } }'
