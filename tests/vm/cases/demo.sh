#!/bin/bash
# demo: what `make demo` shows -- peermem_rs loaded on a real distribution
# kernel next to the simulated NVIDIA driver and RDMA core: a GPU buffer
# registered (ibv_reg_mr), the SG list the HCA gets, a cudaFree that
# invalidates it, and the module's stats.
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
say "cudaMalloc 4 MiB (physical pages in runs of 16), ibv_reg_mr, DMA check, cudaFree"
sim_run 'A=gpu alloc 4M fragmented:16; H=core reg $A 4M; core dma-check $H; gpu free $A; !ESTALE core dma-check $H; core query $H; core dereg $H' ||
  bad "the demo registration failed"
say "what the RDMA core saw (/sys/kernel/mm/memory_peers, on cores that create it)"
echo "  /sys/kernel/mm/memory_peers: $(ls /sys/kernel/mm/memory_peers/), version $(cat /sys/kernel/mm/memory_peers/nv_mem/version)"
for f in num_alloc_mrs num_dealloc_mrs num_reg_bytes num_free_callbacks; do
  printf '  %-18s %s\n' $f "$(cat /sys/kernel/mm/memory_peers/nv_mem/$f)"
done
say "peermem_rs stats (/sys/kernel/debug/peermem_rs/stats)"
grep -vE '^errors\..* 0$' "$STATS" | sed 's/^/  /'
check "unload" pm_down
finish
