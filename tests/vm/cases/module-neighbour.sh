#!/bin/bash
# module-neighbour (issue 24, item 2): with mode=persistent a same-process
# neighbour of the P2P API (sim_neighbour.ko) cannot release our pins: the
# driver looks up a late put_pages among revocable pins only (RM keeps
# persistent pins outside the process's third-party P2P objects), so the
# race of hazard-neighbour-put -- its put while a cudaFree of its memory
# runs, our pin at the freed table's address -- finds no pin of ours, and
# our registration stays pinned and mapped until we deregister it.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + $PM_MODULE mode=persistent" pm_up mode=persistent || finish
check "the same-process neighbour (sim_neighbour.ko)" insmod "$MODS/sim_neighbour.ko"
check "the freed table's address goes to the next pin (reuse_freed)" test "$(param nvidia_p2p_sim reuse_freed)" = Y
# The simulated driver reports the neighbour's put of our persistent
# table's address as a put of the wrong variant (bad_args, a WARN) and
# releases nothing; the real one finds no revocable pin there and answers 0.
sim_expect_warn
check "the neighbour's late put, then our registration's DMA check and deregistration" neighbour_race
check "... released no pin of ours (put_released_other_pin=${NB_OTHER:-?})" test "${NB_OTHER:-x}" = 0
check "... our registration was DMA-checked" grep -qE '^dma_check handle=[0-9]+ ok' /tmp/nb.out
check "no contract violation but the neighbour's wrong-variant put" sim_check bad_args=1
check "no pins or DMA mappings left" \
  test "$(gpu_get pins),$(gpu_get persistent_pins),$(gpu_get mappings)" = 0,0,0
check "sim_neighbour unloads" rmmod sim_neighbour
check "unload" pm_down
finish
