#!/bin/bash
# demo: what `make demo` shows -- the module loaded on a real distribution
# kernel, its version and metadata, then unloaded.
. "${vmstage:-/peermem}/vm/lib.sh"
KO=$MODS/peermem_rs.ko
echo "kernel: $(uname -r)"
echo "--- modinfo peermem_rs.ko"
modinfo "$KO" | grep -vE '^(srcversion|retpoline|depends|intree):'
log_mark demo
check "insmod peermem_rs.ko" insmod "$KO"
echo "--- kernel log"
log_since demo | grep peermem_rs
check "rmmod peermem_rs" rmmod peermem_rs
log_since demo | grep 'peermem_rs unloaded'
finish
