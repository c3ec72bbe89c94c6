#!/bin/bash
# nvpm-register (control, must pass): ibv_reg_mr of GPU memory through
# NVIDIA's nvidia-peermem: 64 KiB to 1 GiB, contiguous and scattered; the
# HCA's DMA check; deregistration; nothing left, no contract violation.
# Its shape, reported as info (the comparison with peermem_rs): a probe pin
# taken and put back in acquire (peermem.c:209-222) and the real one in
# get_pages (peermem.c:406-407), so two get_pages per registration; one SG
# entry per 64 KiB GPU page (peermem.c:276-290).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"

check "simulators (page tables v1) + NVIDIA's nvidia-peermem" nvpm_up || finish
for spec in "64K contiguous" "2M contiguous" "2M fragmented:4" "2M shuffled" "1G contiguous"; do
  set -- $spec; len=$1; layout=$2
  before=$(gpu_get calls.get_pages)
  check "register $len ($layout), DMA check, deregister" \
    sim_run "A=gpu alloc $len $layout; H=core reg \$A $len; core dma-check \$H; gpu stats; gpu get pins; gpu get mappings; core dereg \$H; gpu get pins; gpu get mappings" || continue
  after=$(gpu_get calls.get_pages)
  check "$len: the SG list covers the whole range" test "$(sg_total 1)" = "$(numfmt --from=iec "$len")"
  check "$len: pinned and mapped once while registered, nothing after" \
    test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 1,1,0,0
  echo "info - $len $layout: get_pages calls $((after - before)), SG entries $(nents 1), physical runs $(runs)"
done
no_leaks
check "unload" pm_down
finish
