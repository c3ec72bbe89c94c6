#!/bin/bash
# hazard-map-prologue: a negative control of the bench (tests/vm/selfcheck.list,
# never in suite.list), run in the debug kernel's controls boot.  A cudaFree
# during nvidia_p2p_dma_map_pages' prologue (the window no client can close:
# the application frees memory it is registering) makes the driver read the
# page table it freed: the simulated driver does those reads
# (driver_reads=1), and KASAN must report them, in the driver.  The case
# MUST fail for that report; the module's part (EFAULT, nothing left) is
# checked as in module-map-race.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
param nvidia_p2p_sim driver_reads 1
check "cudaFree in dma_map_pages' prologue: ibv_reg_mr fails with EFAULT" \
  sim_run 'A=gpu alloc 2M fragmented:2; gpu hook map_prologue 1; !EFAULT core reg $A 2M; gpu get pins'
has '^0$' || bad "... something is still pinned"
no_leaks
check "unload" pm_down
finish
