# shellcheck shell=bash
# Sourced by the benchmark scripts.

# median: the median of the numbers (separated by blanks or newlines) on its
# standard input, with 2 decimals
median() {
    tr ' ' '\n' | grep . | sort -g |
        awk '{ v[NR] = $1 } END { printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# range: "min-max" of the numbers on its standard input, with 2 decimals
range() {
    tr ' ' '\n' | grep . | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%.2f-%.2f", a, b }'
}

# device_ip DEVICE: the IPv4 address rdma_cm reaches DEVICE's port 1 at
# (XQP_VM_IP inside the testbed)
device_ip() {
    if [ -n "${XQP_VM_IP:-}" ]; then
        echo "$XQP_VM_IP"
        return
    fi
    rdma link show "$1/1" 2>/dev/null |
        awk '{ for (i = 1; i < NF; ++i) if ($i == "netdev") print $(i + 1) }' |
        xargs -r ip -4 -o addr show 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }'
}
