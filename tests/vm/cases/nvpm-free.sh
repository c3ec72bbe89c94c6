#!/bin/bash
# nvpm-free (control, must pass): cudaFree under a registration.  The free
# callback invalidates the registration through the core
# (peermem.c:156-158); a core honouring INVALIDATE_UNMAPS then calls only
# release, one that ignores it re-enters dma_unmap and put_pages from
# invalidate, which the module skips (callback_task, peermem.c:310-311,
# 337-338); its calls of nvidia_p2p_free_dma_mapping/_free_page_table from
# the callback (peermem.c:160-166) are no-ops in 550 (nvidia/nv-p2p.c
# nvidia_p2p_free_page_table, nvidia_p2p_free_dma_mapping).  The MR ends
# fenced; nothing left, no contract violation.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"

for unmaps in 1 0; do
  CORE_PARAMS=honour_unmaps=$unmaps
  check "simulators (honour_unmaps=$unmaps) + NVIDIA's nvidia-peermem" nvpm_up || finish
  check "honour_unmaps=$unmaps: cudaFree fences the MR before it returns" \
    sim_run 'A=gpu alloc 4M fragmented:2; H=core reg $A 4M; core dma-check $H; gpu free $A; !ESTALE core dma-check $H; core dereg $H; gpu get pins'
  check "... nothing pinned after the free" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT")" = 0
  check "closing the GPU context revokes every MR of it" \
    sim_run 'A=gpu alloc 2M; H1=core reg $A 1M; H2=core reg $A+1M 1M; close gpu; !ESTALE core dma-check $H1; !ESTALE core dma-check $H2'
  no_leaks
  check "unload" pm_down
done
finish
