#!/bin/bash
# module-pagetable: page tables v1 (0x00010002, drivers 515-575) and v2
# (0x00020000, 580+) are both accepted; an unknown major is refused with a
# message, and the pin is released.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

for v in 0x00010002 0x00020000; do
  check "providers (page table $v) + peermem_rs" pm_up mode=invalidate || finish
  param nvidia_p2p_sim pt_version $v
  check "page table $v: register, DMA-check, cudaFree, dereg" \
    sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; gpu free $A; !ESTALE core dma-check $H; core dereg $H'
  no_leaks
  check "unload" pm_down
done
check "providers + peermem_rs" pm_up mode=invalidate || finish
param nvidia_p2p_sim pt_version 0x00030000
log_mark v3
check "page table 0x00030000 (unknown major): refused" sim_run 'A=gpu alloc 1M; !EFAULT core reg $A 1M'
check "... with a message naming the version" grep -q 'page table version 0x00030000 is not supported' <(log_since v3)
check "... counted" test "$(pm_stat errors.unsupported)" = 1
param nvidia_p2p_sim pt_version 0x00020000
no_leaks
check "unload" pm_down
finish
