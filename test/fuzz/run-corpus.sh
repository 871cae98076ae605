#!/bin/sh
# Replays the private-data fuzz corpus through the decoder (standalone build
# of test/fuzz/fuzz_private_data.cc); fails when any input makes it abort.
srcdir=${srcdir:-$(dirname "$0")/../..}
exec ./test/fuzz/fuzz_private_data "$srcdir"/test/fuzz/corpus/private_data/*
