#!/bin/bash
# module-unmap-race (issue 8, defect 4; issue 24): nvidia_p2p_dma_unmap_pages
# takes no API lock, so a cudaFree can run its free callback while a
# dma_unmap of the same registration is in flight, and the driver frees
# what the unmap uses as soon as the callback returns.  peermem_rs now
# never DMA-unmaps a revocable pin through the driver: the core's dma_unmap
# only marks the HCA fenced, and the put releases the pin with its mappings
# (nv-p2p.c nv_p2p_put_pages -> nv_p2p_free_page_table).  So in invalidate
# mode the unmap window is gone: the simulated driver's free hook inside
# dma_unmap never fires, and a cudaFree while the deregistration's put
# waits for the driver (`gpu hook put`) lands in the window between the
# core's dma_unmap and our put.  In persistent mode the unmap is still made
# (no callback there: the free waits for the put).  With the core honouring
# INVALIDATE_UNMAPS (dma_unmap outside its mapping lock) and with one that
# ignores it.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

# settled -- the hook's cudaFree, which runs in a worker and may finish
# after the deregistration returned, has released everything: nothing
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

# last_numbers N -- the last N bare numbers of the last sim_run, on one line.
last_numbers() { grep -xE '[0-9]+' <<< "$SIM_OUT" | tail -n "$1" | paste -sd,; }

for unmaps in 1 0; do
  CORE_PARAMS=honour_unmaps=$unmaps
  check "providers (honour_unmaps=$unmaps) + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
  check "honour_unmaps=$unmaps: a free hook armed inside dma_unmap, then a deregistration" \
    sim_run 'A=gpu alloc 2M fragmented:2; H=core reg $A 2M; gpu hook unmap 1; core dereg $H; gpu get hook_frees; gpu get calls.dma_unmap_pages; gpu hook unmap 0; gpu free $A'
  check "... no dma_unmap_pages call, so the hook never fired (hook_frees,unmaps)" test "$(last_numbers 2)" = 0,0
  check "cudaFree while the deregistration's put waits for the driver (after the core's dma_unmap)" \
    sim_run 'A=gpu alloc 2M fragmented:2; H=core reg $A 2M; gpu hook put 1; core dereg $H; gpu get hook_frees'
  check "... the hook's cudaFree ran" test "$(last_numbers 1)" = 1
  check "... and freed the allocation: nothing pinned, mapped or allocated" settled
  check "again, with another registration that stays live" \
    sim_run 'B=gpu alloc 2M; K=core reg $B 2M; gpu hook put 1; A=gpu alloc 2M; H=core reg $A 2M; core dereg $H; core dma-check $K; core dereg $K; gpu free $B'
  no_leaks
  check "stats: nothing live or pinned, no unpin error" \
    test "$(pm_stat live_registrations),$(pm_stat pinned_bytes),$(pm_stat errors.unpin)" = 0,0,0
  check "unload" pm_down
done

CORE_PARAMS=
check "providers + peermem_rs mode=persistent" pm_up mode=persistent || finish
check "persistent: cudaFree from inside dma_unmap (dereg in flight)" \
  sim_run 'A=gpu alloc 2M fragmented:2; H=core reg $A 2M; gpu hook unmap 1; core dereg $H; gpu get hook_frees; gpu get calls.dma_unmap_pages'
check "... the hook's cudaFree ran inside the one unmap (hook_frees,unmaps)" test "$(last_numbers 2)" = 1,1
check "... and freed the allocation once unpinned" settled
no_leaks
check "unload" pm_down
finish
