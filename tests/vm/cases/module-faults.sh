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
# The driver's put and unmap can fail too (issue 16, item 7).  A failed
# revocable put leaves the pin armed (its mapping with it: a revocable pin
# is never unmapped through the driver, its put or callback frees the
# mapping): it is kept, orphaned, until the owner's cudaFree.
check "put_pages fails with ENOMEM: the pin is kept until cudaFree" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; gpu fault put 1 ENOMEM; core dereg $H; gpu get pins; gpu free $A; gpu get pins'
check "... pinned after the failed put, released by the cudaFree" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 1,0
check "... counted (errors.unpin)" test "$(pm_stat errors.unpin)" = 1
check "... no orphaned pin left" test "$(pm_stat orphaned_pins)" = 0
check "... and its mapping released with it (nothing mapped)" test "$(gpu_get mappings)" = 0
check "a deregistration calls no dma_unmap_pages (an unmap fault stays armed)" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; gpu fault unmap 1 EIO; core dereg $H; gpu get mappings; gpu get pins; gpu get calls.dma_unmap_pages; gpu fault unmap 0 EIO'
check "... nothing mapped or pinned, no unmap call" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 0,0,0
check "... no unmap error" test "$(pm_stat errors.dma_unmap)" = 0
no_leaks
check "unload" pm_down

check "providers + peermem_rs mode=persistent" pm_up mode=persistent || finish
check "get_pages_persistent fails with ENOMEM: ibv_reg_mr fails with ENOMEM" \
  sim_run 'A=gpu alloc 1M; gpu fault persistent 1 ENOMEM; !ENOMEM core reg $A 1M; H=core reg $A 1M; core dereg $H'
check "dma_map_pages fails with EIO (persistent): EIO" \
  sim_run 'A=gpu alloc 1M; gpu fault dma_map 1 EIO; !EIO core reg $A 1M'
# A persistent pin has no callback: a failed put is tried again.
check "put_pages_persistent fails once: tried again, released" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; gpu fault put_persistent 1 ENOMEM; core dereg $H; gpu get persistent_pins'
has '^0$' || bad "... the persistent pin is still held"
check "... the failure counted (errors.unpin)" test "$(pm_stat errors.unpin)" = 1
# A persistent pin is unmapped before its put: a failed unmap leaves the
# mapping to the put, which frees it with the table (nv_p2p_free_page_table).
check "dma_unmap_pages fails with EIO (persistent): the put releases the mapping" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; gpu fault unmap 1 EIO; core dereg $H; gpu get mappings; gpu get persistent_pins'
check "... nothing mapped or pinned" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 0,0
check "... counted (errors.dma_unmap)" test "$(pm_stat errors.dma_unmap)" = 1
no_leaks
# Failing every try: the pin is lost to the driver (its memory stays pinned
# until the driver unloads); the module says so and does not stay loaded
# for it.
sim_expect_warn
log_mark faults-put-persistent
check "put_pages_persistent fails three times: the MR is still deregistered" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; gpu fault put_persistent 3 EBUSY; core dereg $H; gpu get persistent_pins'
has '^1$' || bad "... the driver does not hold the pin it failed to release"
check "... the log says the persistent pin may stay pinned" \
  grep -q "failed to release a persistent pin" <<< "$(log_since faults-put-persistent)"
check "... no registration left" test "$(pm_stat live_registrations)" = 0
check "... rmmod peermem_rs succeeds (nothing keeps the module)" rmmod peermem_rs
check "unload the simulators (the driver reports the lost pin)" sim_unload
check "... as pins_at_unload" grep -q "contract violation pins_at_unload" <<< "$(log_since faults-put-persistent)"
finish
