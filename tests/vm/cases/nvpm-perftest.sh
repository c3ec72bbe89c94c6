#!/bin/bash
# nvpm-perftest (a control that must pass; make test runs it beside
# perftest-cuda in the perftest boot, tests/bench/run.sh, not in the
# nvpm.list boot): perftest-cuda's data checks through
# NVIDIA's nvidia-peermem: unmodified ib_write_bw and ib_read_bw --use_cuda
# on the bench's soft RDMA device, GPU memory on both sides, the bytes
# checked by VA at cudaFree; its SG list (one entry per 64 KiB page, the
# addresses nvidia_p2p_dma_map_pages gave: peermem.c:238-293) carries
# every byte.  Then a cudaFree under ib_write_bw's traffic: its free
# callback invalidates the MR through the core (peermem.c:122-172) and the
# transfer stops with perftest's completion error.  If NVIDIA's module
# fails here, the soft RDMA device, the simulators or the stand-in are
# wrong, not NVIDIA.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"
. "$CASES/perftest-common.inc"
skip_on_debug_kernel "NVIDIA's module through perftest"
perftest_prepare || finish
check "simulators + NVIDIA's nvidia-peermem" nvpm_up || finish
check "rxe0 on the soft RDMA device" soft_rdma_up || finish
pt_check "ib_write_bw 1 MiB, GPU on both sides" ib_write_bw "$M" gpu gpu 10
pt_check "ib_read_bw 4 MiB, GPU on both sides, each buffer 0x1234 bytes into its allocation" \
  ib_read_bw $((4 * M)) gpu gpu 5 -- PEERMEM_CUDA_STANDIN_OFFSET=0x1234
free_under_traffic invalidate
check "soft RDMA device down" soft_rdma_down
no_leaks
check "unload" pm_down
finish
