#!/bin/bash
# module-free: cudaFree under a registration.
#  persistent: the memory stays pinned (and the MR valid) until dereg;
#  invalidate: the free callback fences DMA through the core before the
#    free returns, calls nothing in the driver, and leaves the MR fenced --
#    with the core honouring PEER_MEM_INVALIDATE_UNMAPS and with a core that
#    ignores it (re-entering dma_unmap/put_pages from invalidate);
#  races: cudaFree between acquire and get_pages, between get_pages and
#    dma_map, right after dma_map, and during dereg.
# Afterwards: no pins, no mappings, no contract violation.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + peermem_rs mode=persistent" pm_up mode=persistent || finish
check "persistent: cudaFree while registered leaves the MR valid" \
  sim_run 'A=gpu alloc 2M fragmented:2; H=core reg $A 2M; gpu free $A; core dma-check $H; gpu get persistent_pins; core dereg $H; gpu get persistent_pins'
check "... pinned until dereg, released after" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 1,0
no_leaks
check "unload" pm_down

for unmaps in 1 0; do
  style="core honours INVALIDATE_UNMAPS"; [ $unmaps = 0 ] && style="core ignores INVALIDATE_UNMAPS"
  check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
  check "peer_core_sim honour_unmaps=$unmaps" param peer_core_sim honour_unmaps $unmaps
  check "invalidate, $style: cudaFree fences the MR before it returns" \
    sim_run 'A=gpu alloc 4M fragmented:2; H=core reg $A 4M; core dma-check $H; gpu free $A; !ESTALE core dma-check $H; core query $H; core dereg $H; gpu get pins'
  state=invalidated; [ $unmaps = 0 ] && state=unmapped   # dma_unmap/put_pages ran inside
  has "^query handle=1 state=$state" || bad "state after cudaFree: $(grep ^query <<< "$SIM_OUT")"
  check "... counted as an invalidation" test "$(pm_stat invalidations)" -ge 1
  check "... nothing pinned by us any more" test "$(pm_stat pinned_bytes)" = 0
  check "closing the GPU context revokes every MR of it" \
    sim_run 'A=gpu alloc 2M; H1=core reg $A 1M; H2=core reg $A+1M 1M; H3=core reg $A 2M; close gpu; !ESTALE core dma-check $H1; !ESTALE core dma-check $H2; !ESTALE core dma-check $H3'
  no_leaks
  check "unload" pm_down
done

check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
check "cudaFree between acquire and get_pages: registration fails cleanly" \
  sim_run 'A=gpu alloc 2M; !EFAULT core reg $A 2M --hook after_acquire:free; gpu get pins'
check "cudaFree between get_pages and dma_map: registration fails cleanly" \
  sim_run 'A=gpu alloc 2M; !EFAULT core reg $A 2M --hook after_get_pages:free; gpu get pins'
# The hook's free fences the MR once the registration has dropped the
# core's mapping lock (after ibv_reg_mr returned): wait for it.
check "cudaFree right after dma_map: the MR ends up fenced" \
  sim_run 'A=gpu alloc 2M; ?H=core reg $A 2M --hook after_dma_map:free; ?!ESTALE until 10000 core dma-check $H; gpu get pins'
check "cudaFree during dereg" \
  sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dereg $H --hook in_dereg:free; gpu get pins'
check "every race left nothing pinned" bash -c "! grep -qxE '[1-9][0-9]*' <<< \"\$SIM_OUT\""
no_leaks
check "unload" pm_down
finish
