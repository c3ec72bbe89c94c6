#!/bin/bash
# module-data (issue 34): bytes move through peermem_rs's scatterlists.
# The simulated HCA reads and writes GPU memory by DMA through the bus
# addresses of the SG list peermem_rs built (peer_core_sim's PCSIM_IOC_DMA,
# through nvidia_p2p_sim's BAR, where only pinned, DMA-mapped memory
# answers); the CPU checks through the allocation's own pages (cuMemcpy by
# VA), which share nothing with the list.  Each check crosses the two ways
# (the CPU writes, the HCA reads; the HCA writes, the CPU reads): a wrong
# bus address, first-page offset, merged run or length is wrong bytes, not
# a consistent round trip (the plants sg_shift and sg_merge must fail
# here).  Both modes; every layout; starts and ends off the 64 KiB and
# 4 KiB boundaries; 4 KiB up to 1 GiB (in persistent mode; 256 MiB in
# invalidate mode, a quarter of each on the debug kernel); the bytes around
# a registration stay untouched; an invalidated registration
# moves nothing, a persistent one keeps its memory after cudaFree, also
# when the free comes while the HCA writes.
# data_big=0 leaves out the big one (the plant-sg-* controls).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

M=$((1 << 20))
base=$((0x510000000000))
for mode in invalidate persistent; do
  # The big one: 1 GiB once (persistent, the default mode), 256 MiB in the
  # other mode; a quarter of that on the debug kernel (KASAN checks every
  # copy).
  big=$((256 * M)); [ $mode = persistent ] && big=$((1024 * M))
  [ "$(debug_kernel)" = yes ] && big=$((big / 4))
  name="$((big / M)) MiB"; [ $big = $((1024 * M)) ] && name="1 GiB"
  check "providers + peermem_rs mode=$mode" pm_up mode=$mode || finish
  regs=$(pm_stat registrations)
  va=$base; base=$((base + (4 << 30)))
  step() { va=$((va + (2 << 30))); }
  check "$mode: 4 KiB at the start of a GPU page" cross_check $va $M contiguous 0 0x1000; step
  check "$mode: 0x5000 bytes at +0x1234 (off every page boundary)" \
    cross_check $va $M contiguous 0x1234 0x5000; step
  check "$mode: 0x20 bytes across a 64 KiB boundary" cross_check $va $M contiguous 0xfff0 0x20; step
  check "$mode: 3 MiB at +0xfff8 in runs of 2 GPU pages" \
    cross_check $va $((4 * M)) fragmented:2 0xfff8 $((3 << 20)); step
  check "$mode: 8 MiB, every GPU page apart, in random order" cross_check $va $((8 * M)) shuffled 0 $((8 * M)); step
  n=5
  if [ "${data_big:-1}" = 1 ]; then
    check "$mode: $name, 64 KiB in, the last 4 KiB left out" \
      cross_check $va $big contiguous 0x10000 $((big - 0x11000)); step; n=6
  fi
  check "... peermem_rs served each registration" test "$(pm_stat registrations)" -ge $((regs + n))
  no_leaks
  check "unload" pm_down
done

# After cudaFree: an invalidated registration moves nothing (the HCA is
# fenced); a persistent one still reaches its memory, which stays pinned
# until the deregistration, as the real driver keeps it.
# Under traffic: cudaFree while the HCA writes (256 MiB, 64 MiB under
# KASAN, 64 KiB per DMA step): the invalidation waits for the step in
# flight and the write stops with ESTALE; in persistent mode it completes
# and the memory keeps what it wrote.
va=$((base + (8 << 30))) traffic=256M; [ "$(debug_kernel)" = yes ] && traffic=64M
check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
check "invalidate: after cudaFree the HCA can neither read nor write" \
  sim_run "A=gpu alloc 2M fragmented:4 --at $va; data fill \$A 2M 1; H=core reg \$A 2M; data read \$H \$A 2M 1;" \
    "gpu free \$A; !ESTALE data read \$H \$A 2M 1; !ESTALE data write \$H \$A 2M 3; core dereg \$H"
check "invalidate: cudaFree during the HCA's write stops it (ESTALE)" \
  sim_run "A=gpu alloc $traffic --at $((va + (2 << 30))); H=core reg \$A $traffic --sg-max 1; & !ESTALE data write \$H \$A $traffic 2;" \
    "sleep 100; gpu free \$A; wait; core dereg \$H"
no_leaks
check "unload" pm_down
check "providers + peermem_rs mode=persistent" pm_up mode=persistent || finish
check "persistent: after cudaFree the HCA still reads and writes the pinned memory" \
  sim_run "A=gpu alloc 2M fragmented:4 --at $va; data fill \$A 2M 1; H=core reg \$A 2M; gpu free \$A;" \
    "data read \$H \$A 2M 1; data write \$H \$A 2M 3; data read \$H \$A 2M 3; !EFAULT data verify \$A 2M 3; core dereg \$H"
check "persistent: cudaFree during the HCA's write: it completes, the memory keeps it" \
  sim_run "A=gpu alloc $traffic --at $((va + (2 << 30))); H=core reg \$A $traffic --sg-max 1; & data write \$H \$A $traffic 2;" \
    "sleep 100; gpu free \$A; wait; data read \$H \$A $traffic 2; core dereg \$H"
no_leaks
check "unload" pm_down
finish
