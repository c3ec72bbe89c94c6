#!/bin/bash
# module-faults: every failure the driver can return reaches the caller of
# ibv_reg_mr as that errno, and leaves no pin and no mapping behind.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
for e in ENOMEM EIO EBUSY; do
  check "get_pages fails with $e: ibv_reg_mr fails with $e" \
    sim_run "A=gpu alloc 1M; gpu fault get_pages 1 $e; !$e core reg \$A 1M; H=core reg \$A 1M; core dereg \$H"
done
for e in ENOMEM EIO; do
  check "dma_map_pages fails with $e: ibv_reg_mr fails with $e" \
    sim_run "A=gpu alloc 1M; gpu fault dma_map 1 $e; !$e core reg \$A 1M; H=core reg \$A 1M; core dereg \$H"
done
check "pin errors counted" test "$(pm_stat errors.pin)" = 3
check "dma_map errors counted" test "$(pm_stat errors.dma_map)" = 2
check "non-PCI DMA device: refused with EOPNOTSUPP" \
  bash -c 'echo 1 > /sys/module/peer_core_sim/parameters/hca_nonpci && '"$SIMCTL"' run "A=gpu alloc 1M; !EOPNOTSUPP core reg \$A 1M"; r=$?; echo 0 > /sys/module/peer_core_sim/parameters/hca_nonpci; exit $r'
check "... counted" test "$(pm_stat errors.not_pci)" = 1
no_leaks
check "unload" pm_down

check "providers + peermem_rs mode=persistent" pm_up mode=persistent || finish
check "get_pages_persistent fails with ENOMEM: ibv_reg_mr fails with ENOMEM" \
  sim_run 'A=gpu alloc 1M; gpu fault persistent 1 ENOMEM; !ENOMEM core reg $A 1M; H=core reg $A 1M; core dereg $H'
check "dma_map_pages fails with EIO (persistent): EIO" \
  sim_run 'A=gpu alloc 1M; gpu fault dma_map 1 EIO; !EIO core reg $A 1M'
no_leaks
check "unload" pm_down
finish
