#!/bin/bash
# demo: what `make demo` shows -- peermem_rs loaded on a real distribution
# kernel next to the simulated NVIDIA driver and RDMA core: a GPU buffer
# registered (ibv_reg_mr), the SG list the HCA gets, the simulated HCA's
# DMA through that list (an RDMA WRITE and READ), checked against the GPU
# memory read by VA, a cudaFree that invalidates it; then perftest's
# ib_write_bw --use_cuda through the same path on the bench's soft RDMA
# device, with a cudaFree under its traffic; and the module's stats.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
. "$CASES/perftest-common.inc"
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
say "ib_write_bw --use_cuda (perftest 25.01 with CUDA, unmodified) over the bench's soft RDMA device"
# Both buffers cudaMalloc'd, 1 MiB per write: the device moves every byte
# through peermem_rs's SG lists into the GPU's BAR; each process checks its
# GPU buffer by VA at cudaFree (cuda-standin lines).
if perftest_prepare && check "rxe0 on the soft RDMA device (rxe_peer)" soft_rdma_up; then
  pt_check "ib_write_bw -s 1M -n 50 --use_cuda=0 on both sides, the bytes checked" ib_write_bw $M gpu gpu 50
  echo "$PT_OUT" | grep -E '^(== |.*cuda-standin: check| *#bytes| *[0-9]+ +50 )' | sed 's/^/  /'
  say "cudaFree of the server's registered buffer under ib_write_bw's traffic (mode=invalidate)"
  free_under_traffic invalidate
  grep -iE 'under traffic|completion with error' /tmp/pt_srv /tmp/pt_cli | sed 's|^/tmp/pt_||; s/^/  /'
  check "soft RDMA device down" soft_rdma_down
else
  bad "perftest with CUDA or the soft RDMA device is missing (see above)"
fi
say "what the RDMA core saw (/sys/kernel/mm/memory_peers, on cores that create it)"
echo "  /sys/kernel/mm/memory_peers: $(ls /sys/kernel/mm/memory_peers/), version $(cat /sys/kernel/mm/memory_peers/nv_mem/version)"
for f in num_alloc_mrs num_dealloc_mrs num_reg_bytes num_free_callbacks; do
  printf '  %-18s %s\n' $f "$(cat /sys/kernel/mm/memory_peers/nv_mem/$f)"
done
say "peermem_rs stats (/sys/kernel/debug/peermem_rs/stats)"
grep -vE '^errors\..* 0$' "$STATS" | sed 's/^/  /'
check "unload" pm_down
finish
