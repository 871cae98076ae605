#!/bin/sh
# Regenerate the build system (configure, Makefile.in, ...).
set -e
cd "$(dirname "$0")"
mkdir -p config/aux
exec autoreconf --install --force --warnings=all,no-portability
