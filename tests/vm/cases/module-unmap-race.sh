#!/bin/bash
# module-unmap-race (issue 8, defect 4): nvidia_p2p_dma_unmap_pages takes no
# API lock, so a cudaFree can run its free callback while a dma_unmap of the
# same registration is in flight (here: deregistration, with the simulated
# driver's free hook inside dma_unmap).  The driver frees the mapping's
# bookkeeping as soon as the callback returns: the callback must wait for
# the unmap in flight (nvidia_p2p_sim counts `unmap_in_flight_at_free`
# otherwise).  With the core honouring INVALIDATE_UNMAPS (dma_unmap outside
# its mapping lock) and with one that ignores it.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

for unmaps in 1 0; do
  CORE_PARAMS=honour_unmaps=$unmaps
  check "providers (honour_unmaps=$unmaps) + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
  check "honour_unmaps=$unmaps: cudaFree from inside dma_unmap (dereg in flight)" \
    sim_run 'A=gpu alloc 2M fragmented:2; H=core reg $A 2M; gpu hook unmap 1; core dereg $H; gpu get hook_frees; gpu get pins; gpu get mappings; gpu get allocations'
  check "... the hook freed the allocation; nothing pinned, mapped or allocated" \
    test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 1,0,0,0
  if grep -q '^callback_waits ' "$STATS"; then
    echo "info - callback_waits $(pm_stat callback_waits)"
  fi
  check "again, with another registration that stays live" \
    sim_run 'B=gpu alloc 2M; K=core reg $B 2M; gpu hook unmap 1; A=gpu alloc 2M; H=core reg $A 2M; core dereg $H; core dma-check $K; core dereg $K; gpu free $B'
  no_leaks
  check "unload" pm_down
done
finish
