#!/bin/bash
# nvpm-unmap-race (control, must fail: unmap_in_flight_at_free): a cudaFree
# whose free callback runs while a dma_unmap of the same registration is in
# flight (deregistration; the simulated driver's free hook inside
# dma_unmap_pages, which takes no API lock).  The driver frees the mapping
# when the callback returns, so a callback must wait for the unmap in
# flight.  nvidia-peermem's callback (peermem.c:122-172) invalidates and
# returns without any wait for its nv_dma_unmap (peermem.c:313-315).  With
# a core that ignores INVALIDATE_UNMAPS the deregistration holds the
# registration's mapping lock across dma_unmap and put_pages, and the
# callback's invalidate (peermem.c:157) waits for it while holding the
# driver's lock that put_pages needs: the core reports invalidate_deadlock
# (the real one hangs).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"

for unmaps in 1 0; do
  CORE_PARAMS=honour_unmaps=$unmaps
  check "simulators (honour_unmaps=$unmaps) + NVIDIA's nvidia-peermem" nvpm_up || finish
  check "honour_unmaps=$unmaps: cudaFree from inside dma_unmap (dereg in flight)" \
    sim_run 'A=gpu alloc 2M fragmented:2; H=core reg $A 2M; gpu hook unmap 1; core dereg $H; sleep 500; gpu get hook_frees'
  check "... the hook's cudaFree ran" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT")" = 1
  no_leaks
  check "unload" pm_down
done
finish
