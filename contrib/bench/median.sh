# Sourced by the benchmark scripts: median prints the median of the numbers
# (separated by blanks or newlines) on its standard input, with 2 decimals.
median() {
    tr ' ' '\n' | grep . | sort -g |
        awk '{ v[NR] = $1 } END { printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
