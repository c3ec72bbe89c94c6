#!/bin/bash
# perftest-cuda (issue 34): the mission's own validation, ib_write_bw
# --use_cuda, on the bench.  perftest, unmodified and built with CUDA
# (tests/bench/perftest-cuda.sh), drives the bench's soft RDMA device
# (tests/rxe-peer: rxe whose MRs on memory get_user_pages refuses go to the
# simulated peer-memory core, as mlx5's do on DOCA-OFED) on GPU memory the
# simulated NVIDIA driver owns (the libcuda stand-in's nvsim mode): its
# ibv_reg_mr is served by peermem_rs, and every byte the device moves goes
# through the bus addresses of peermem_rs's scatterlist into the GPU's
# BAR.  What landed is checked through the driver's own path (cuMemcpy by
# VA, at cuMemFree): each GPU buffer is filled with a pattern of its own
# (server seed 1, client seed 2); the bytes the transfer moved must hold the
# other side's pattern where perftest puts them (the second half of the
# server's buffer for WRITE and SEND, the first half of the client's for
# READ), every other byte its own.  A wrong address, offset, merge or
# length is wrong bytes there.
# Host memory on the other side is perftest's, filled at random: there the
# bytes moved only have to have changed.  In persistent mode (the default):
# ib_write_bw, ib_read_bw and ib_send_bw with GPU memory on both sides, GPU
# memory on one side, 4 KiB to PERFTEST_MAX (16 MiB; 4 MiB and half the
# iterations on the debug kernel, under KASAN and lockdep), buffers
# 0x1234 bytes into their allocations; in invalidate mode (the same SG
# lists) ib_write_bw; peermem_rs's counters grow by perftest's
# registrations.  Then cudaFree
# under ib_write_bw's traffic: in invalidate mode the transfer stops with
# an error perftest reports; in persistent mode it completes.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
. "$CASES/perftest-common.inc"
perftest_prepare || finish
# On the debug kernel (KASAN, lockdep, kmemleak under TCG: every packet
# through rxe costs several times what it costs on Debian's kernel) the
# same runs, fewer bytes: each run's iterations divided by PERFTEST_DIV
# (there 2, else 1; never under perftest's minimum of 5) and the largest
# buffer PERFTEST_MAX 4 MiB (else 16 MiB).
if [ "$(debug_kernel)" = yes ]; then : "${PERFTEST_MAX:=$((4 * M))}" "${PERFTEST_DIV:=2}"; fi
: "${PERFTEST_MAX:=$((16 * M))}" "${PERFTEST_DIV:=1}"
iters() { local n=$(($1 / PERFTEST_DIV)); echo $((n < 5 ? 5 : n)); }

# The IOMMU configuration (make test's perftest boot: vm.sh VM_IOMMU=1,
# QEMU's VT-d in front of the HCA, strict and translating): the simulated
# driver maps the GPU pages for the HCA with dma_map_resource, so the SG
# lists carry IOVAs, and the HCA's DMA goes through its IOMMU domain (an
# address with nothing mapped faults).  Elsewhere the DMA address is the
# bus address itself, as dma-direct gives it.
iommu=0; grep -qw vmiommu=1 /proc/cmdline && iommu=1
# iommu_seen MODE -- the HCA's DMA went through the IOMMU (or, without
# one, did not), and never faulted.
iommu_seen() {
  if [ $iommu = 1 ]; then
    check "$1: the SG lists carry IOVAs (mappings remapped: $(gpu_get dma_remapped))" \
      test "$(gpu_get dma_remapped)" -gt 0
    check "$1: the HCA's DMA went through its IOMMU ($(core_get hca_iommu_dma) steps)" \
      test "$(core_get hca_iommu_dma)" -gt 0
  else
    check "$1: no IOMMU: DMA addresses are bus addresses (none remapped)" \
      test "$(gpu_get dma_remapped)" = 0
  fi
  check "$1: no IOMMU fault" test "$(core_get hca_iommu_faults)" = 0
}

check "rxe0 on the soft RDMA device" soft_rdma_up || finish
for mode in persistent invalidate; do
  check "providers + peermem_rs mode=$mode" pm_up mode=$mode || finish
  check "$mode: the HCA is behind a translating IOMMU: $iommu" test "$(core_get hca_iommu)" = $iommu
  regs=$(pm_stat registrations) n=0
  # pt_run ARGS... -- a pt_check, counting the GPU buffers registered.
  pt_run() {
    local a=("$@"); a[5]=$(iters "$6")
    pt_check "${a[@]}"; n=$((n + $([ "$4" = gpu ] && echo 1 || echo 0) + $([ "$5" = gpu ] && echo 1 || echo 0)))
  }
  if [ $mode = persistent ]; then
    for tool in ib_write_bw ib_read_bw ib_send_bw; do
      pt_run "$mode: $tool 1 MiB, GPU on both sides" $tool "$M" gpu gpu 10
    done
    # The directions make hwtest measures: into GPU memory from a host
    # client, and out of it into one.
    pt_run "$mode: ib_write_bw 64 KiB into GPU memory (host client)" ib_write_bw $((64 << 10)) gpu host 20
    pt_run "$mode: ib_read_bw 64 KiB out of GPU memory (host client)" ib_read_bw $((64 << 10)) gpu host 20
    pt_run "$mode: ib_write_bw 4 KiB, GPU on both sides" ib_write_bw 4096 gpu gpu 50
    pt_run "$mode: ib_read_bw $((PERFTEST_MAX / M)) MiB, GPU on both sides, each buffer 0x1234 bytes into its allocation" \
      ib_read_bw "$PERFTEST_MAX" gpu gpu 5 -- PEERMEM_CUDA_STANDIN_OFFSET=0x1234
  else
    # The same SG lists; what differs is the invalidation.
    pt_run "$mode: ib_write_bw 1 MiB, GPU on both sides" ib_write_bw "$M" gpu gpu 10
  fi
  check "$mode: peermem_rs served perftest's registrations ($(pm_stat registrations) >= $regs + $n)" \
    test "$(pm_stat registrations)" -ge $((regs + n))
  iommu_seen $mode
  free_under_traffic $mode
  no_leaks
  check "$mode: unload" pm_down
done
check "soft RDMA device down" soft_rdma_down
finish
