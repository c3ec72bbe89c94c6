#!/bin/bash
# demo: what `make demo` shows -- peermem_rs loaded on a real distribution
# kernel next to the simulated NVIDIA driver and RDMA core: a GPU buffer
# registered (ibv_reg_mr), the SG list the HCA gets, the simulated HCA's
# DMA through that list (an RDMA WRITE and READ), checked against the GPU
# memory read by VA, a cudaFree that invalidates it, and the module's stats.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
say() { printf '\n## %s\n' "$*"; }
say "kernel $(uname -r); peermem_rs $(modinfo -F version "$KO")"
# The core's own counters (memory_peers) exist only on cores that create
# them (older MLNX_OFED, Ubuntu): the demo shows such a core.
CORE_PARAMS=memory_peers=1
check "load the simulated NVIDIA driver and RDMA core (with memory_peers)" sim_load || finish
log_mark demo
check "insmod peermem_rs.ko mode=invalidate" insmod "$KO" mode=invalidate || finish
log_since demo | grep peermem_rs | sed 's/^\[[ 0-9.]*\] /  kernel: /'
say "cudaMalloc 4 MiB (physical pages in runs of 16), ibv_reg_mr, the HCA's DMA through the SG list, cudaFree"
# data fill/verify: the CPU by VA (cuMemcpy); data read/write: the HCA by
# DMA through the bus addresses peermem_rs handed the core.
sim_run 'A=gpu alloc 4M fragmented:16; data fill $A 4M 1; H=core reg $A 4M; data read $H $A 4M 1;' \
  'data write $H $A 4M 2; data verify $A 4M 2; gpu free $A; !ESTALE data write $H $A 4M 3; core query $H; core dereg $H' ||
  bad "the demo registration or its data failed"
say "what the RDMA core saw (/sys/kernel/mm/memory_peers, on cores that create it)"
echo "  /sys/kernel/mm/memory_peers: $(ls /sys/kernel/mm/memory_peers/), version $(cat /sys/kernel/mm/memory_peers/nv_mem/version)"
for f in num_alloc_mrs num_dealloc_mrs num_reg_bytes num_free_callbacks; do
  printf '  %-18s %s\n' $f "$(cat /sys/kernel/mm/memory_peers/nv_mem/$f)"
done
say "peermem_rs stats (/sys/kernel/debug/peermem_rs/stats)"
grep -vE '^errors\..* 0$' "$STATS" | sed 's/^/  /'
check "unload" pm_down
finish
