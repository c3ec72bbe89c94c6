#!/bin/bash
# nvpm-data (control, must pass): module-data's checks through NVIDIA's
# nvidia-peermem, whose SG list has one entry per 64 KiB page with the DMA
# addresses of nvidia_p2p_dma_map_pages (peermem.c:238-293): the simulated
# HCA's DMA through it must land where the CPU reads by VA, and a
# registration its free callback invalidated (peermem.c:122-172) must move
# nothing.  If NVIDIA's module fails here, the simulated HCA or the
# simulated GPU's BAR is wrong, not NVIDIA.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"

M=$((1 << 20)) va=$((0x520000000000))
step() { va=$((va + (2 << 30))); }
check "simulators + NVIDIA's nvidia-peermem" nvpm_up || finish
check "0x5000 bytes at +0x1234 (off every page boundary)" cross_check $va $M contiguous 0x1234 0x5000; step
check "3 MiB at +0xfff8 in runs of 2 GPU pages" cross_check $va $((4 * M)) fragmented:2 0xfff8 $((3 << 20)); step
check "8 MiB, every GPU page apart, in random order" cross_check $va $((8 * M)) shuffled 0 $((8 * M)); step
check "after cudaFree the HCA can neither read nor write" \
  sim_run "A=gpu alloc 2M fragmented:4 --at $va; data fill \$A 2M 1; H=core reg \$A 2M; data read \$H \$A 2M 1;" \
    "gpu free \$A; !ESTALE data read \$H \$A 2M 1; !ESTALE data write \$H \$A 2M 3; core dereg \$H"
no_leaks
check "unload" pm_down
finish
