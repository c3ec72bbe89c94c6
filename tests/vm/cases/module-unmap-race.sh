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

# settled -- the hook's cudaFree, which runs in a worker and may finish
# after the deregistration returned (its callback waited for the unmap in
# flight, which waited for the hook), has released everything: nothing
# pinned, mapped or allocated within 10 s.
settled() {
  local s i
  for i in $(seq 100); do
    s="$(gpu_get pins),$(gpu_get mappings),$(gpu_get allocations)"
    [ "$s" = 0,0,0 ] && return 0
    sleep 0.1
  done
  echo "    pins,mappings,allocations: $s"; return 1
}

for unmaps in 1 0; do
  CORE_PARAMS=honour_unmaps=$unmaps
  check "providers (honour_unmaps=$unmaps) + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
  check "honour_unmaps=$unmaps: cudaFree from inside dma_unmap (dereg in flight)" \
    sim_run 'A=gpu alloc 2M fragmented:2; H=core reg $A 2M; gpu hook unmap 1; core dereg $H; gpu get hook_frees'
  check "... the hook's cudaFree ran" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT")" = 1
  check "... and freed the allocation: nothing pinned, mapped or allocated" settled
  if grep -q '^callback_waits ' "$STATS"; then
    echo "info - callback_waits $(pm_stat callback_waits)"
  fi
  check "again, with another registration that stays live" \
    sim_run 'B=gpu alloc 2M; K=core reg $B 2M; gpu hook unmap 1; A=gpu alloc 2M; H=core reg $A 2M; core dereg $H; core dma-check $K; core dereg $K; gpu free $B'
  no_leaks
  check "unload" pm_down
done
finish
