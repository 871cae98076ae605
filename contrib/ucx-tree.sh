# contrib/ucx-tree.sh - helpers for scripts that take an unpacked UCX source
# tree (sourced, not run).

# ucx_tree_version DIR: MAJOR.MINOR.PATCH of the UCX source tree DIR
ucx_tree_version() {
    local v out=
    for v in major minor patch; do
        out+=$(grep "^define(\[ucx_ver_$v\]" "$1/configure.ac" | head -n 1 |
                   cut -d, -f2 | cut -d')' -f1 | tr -d ' ').
    done
    echo "${out%.}"
}

# ucx_tree_key DIR [SALT]: a checksum of every file's path, size and mtime in
# DIR (without .git), and SALT: it changes when the tree or the recipe does
ucx_tree_key() {
    { printf '%s\n' "${2:-}"
      (cd "$1" && find . -path ./.git -prune -o -type f -printf '%P %s %T@\n' | LC_ALL=C sort)
    } | cksum | cut -d' ' -f1
}
