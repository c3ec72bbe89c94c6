#!/bin/bash
# nvpm-map-race (control, must fail: dma_after_free): a cudaFree during
# nvidia_p2p_dma_map_pages' epilogue (the simulated driver's free hook
# after its lock was dropped).  The callback comes before the module
# stored the mapping: nvidia-peermem's returns early without invalidating
# (peermem.c:146-148), and nv_dma_map then builds the SG list from the
# mapping the driver handed out after the free (peermem.c:261-292): the MR
# is registered on freed GPU memory, which the core sees at MAPPED
# (dma_after_free).  A correct client fails the registration (peermem_rs:
# module-map-race).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"

check "simulators (page tables v1) + NVIDIA's nvidia-peermem" nvpm_up || finish
sim_run 'A=gpu alloc 2M fragmented:2; gpu hook map_epilogue 1; ?H=core reg $A 2M; gpu get hook.map_epilogue'
if has '^reg handle='; then
  bad "ibv_reg_mr succeeded on GPU memory freed during the map"
else
  ok "ibv_reg_mr failed on GPU memory freed during the map"
fi
check "... the hook's free ran" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | head -n 1)" = 0
no_leaks
check "unload" pm_down
finish
