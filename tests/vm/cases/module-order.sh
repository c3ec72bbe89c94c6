#!/bin/bash
# module-order (issue 8, defect 6).
# Load order: the core publishes a client before
# ib_register_peer_memory_client returns (peer_core_sim register_hold_ms
# keeps it from returning): a registration served in that window and then
# freed must still be fenced -- or not be served at all -- never left mapped
# for the HCA after the cudaFree (dma_after_free).
# Unload order (best effort, timing dependent): debugfs `stats` read in a
# loop while rmmod runs, with ib_unregister_peer_memory_client held open.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

pm_down > /dev/null 2>&1
# Held until released below (the core reads the knob again every 10 ms), so
# a stalled VM cannot close the window before the case is done with it.
CORE_PARAMS=register_hold_ms=600000
check "simulated GPU + core (ib_register_peer_memory_client held open)" sim_load || finish
insmod "$KO" mode=invalidate > /tmp/insmod.out 2>&1 & ins=$!
for i in $(seq 200); do
  dmesg | grep -q 'client published, holding' && break; sleep 0.05
done
check "the client is published while its insmod is still running" kill -0 $ins
check "register in the window, then cudaFree: served and fenced, or not served" \
  sim_run 'A=gpu alloc 2M; ?H=core reg $A 2M; gpu free $A; ?core dma-check $H; gpu get pins'
if has '^dma_check handle=1 ok'; then bad "the MR is still usable by the HCA after the cudaFree"; fi
param peer_core_sim register_hold_ms 0
check "insmod completes once the core returns" wait $ins || cat /tmp/insmod.out
check "no contract violation (dma_after_free: a revoked MR left mapped)" sim_check
check "the module works normally afterwards" \
  sim_run 'A=gpu alloc 2M; H=core reg $A 2M; gpu free $A; !ESTALE core dma-check $H; core dereg $H'

param peer_core_sim unregister_hold_ms 1500
( end=$((SECONDS + 8)); while [ $SECONDS -lt $end ]; do cat "$STATS" > /dev/null 2>&1; grep -q '^peermem_rs ' /proc/modules || break; done ) & reader=$!
sleep 0.2
check "rmmod with debugfs stats read in a loop meanwhile" rmmod peermem_rs
wait $reader
param peer_core_sim unregister_hold_ms 0
no_leaks
check "unload" pm_down
finish
