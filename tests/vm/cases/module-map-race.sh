#!/bin/bash
# module-map-race (issue 8, defect 5): nvidia_p2p_dma_map_pages reads the
# page table before taking the driver's API lock and links the new mapping
# after dropping it; a cudaFree in either window (the simulated driver's
# free hooks) is a window no client can close.  The module must make the
# least of it: the registration fails cleanly with EFAULT, the module never
# touches the table or mapping again (no KASAN on the debug kernel), no
# client contract violation, nothing left pinned or mapped.  (The driver's
# own hazard is counted by nvidia_p2p_sim as map_raced_free.)
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
# After a free in the prologue the driver reads the freed table
# (driver_reads): a KASAN report on the debug kernel, where sim_load turns
# the reads off and this case checks only the module's part (any read of
# the freed table by the module is still a KASAN report);
# hazard-map-prologue runs the driver's reads in the negative controls'
# boot.
for site in map_prologue map_epilogue; do
  check "cudaFree in dma_map_pages' $site: ibv_reg_mr fails with EFAULT" \
    sim_run "A=gpu alloc 2M fragmented:2; gpu hook $site 1; !EFAULT core reg \$A 2M; gpu get hook.$site; gpu get pins; gpu get mappings; gpu get allocations"
  check "... the hook's free ran; nothing pinned, mapped or allocated" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 0,0,0,0
  check "... and the module keeps working" \
    sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; gpu free $A; !ESTALE core dma-check $H; core dereg $H'
done
check "the driver counted the raced calls (its hazard, not the client's)" test "$(gpu_get map_raced_free)" -ge 2
check "... the raced calls' two mappings (of freed memory) are the driver's leak, never touched by the module" test "$(gpu_get orphan_mappings)" = 2
# The driver knows the call's table by its address alone: a pin made while
# the map is held after the free would get the freed table's address, and
# the driver would map that pin (prologue) or link the mapping into it
# (epilogue) for us -- another registration's memory (sim-races shows the
# driver's side with a client that has no fence).  Here the second
# registration's pin gets that address and the driver goes on with it
# (map_newer_pin).  Our fence (rust/logic/fence.rs) sees it: the callback
# marked the map late, and the new pin has its address.  That pin is never
# handed on: once the late map returned it is put, the driver's mapping
# with it, and made anew; the simulated driver would report its owner's
# map of a pin that still holds such a mapping (map_newer_pin_kept).
for site in map_prologue map_epilogue; do
  n0=$(gpu_get map_newer_pin); r0=$(pm_stat pins_redone)
  check "$site held 1.5 s after the free while another thread registers" \
    sim_run "A=gpu alloc 2M; B=gpu alloc 2M; gpu hook $site 1 1500; & !EFAULT core reg \$A 2M; sleep 400; H=core reg \$B 2M; wait; gpu get mappings; core dma-check \$H; core dereg \$H; gpu free \$B"
  check "... the driver went on with the newer pin (map_newer_pin: $n0, then +1)" test "$(gpu_get map_newer_pin)" = "$((n0 + 1))"
  check "... which was put and made anew (pins_redone: $r0, then +1)" test "$(pm_stat pins_redone)" = "$((r0 + 1))"
  check "... the new pin holds only its own mapping" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 1
done
check "... no pin was mapped by its owner while holding the late map's mapping (map_newer_pin_kept=0)" \
  test "$(gpu_get violation.map_newer_pin_kept)" = 0
# get_pages pins and registers the free callback in two holds of the
# driver's lock; a cudaFree in between tears the pin down without a
# callback and the get fails (EINVAL: not GPU memory any more, declined).
check "cudaFree between get_pages' two holds: ibv_reg_mr fails, nothing pinned" \
  sim_run 'A=gpu alloc 2M; gpu hook get_pages 1; !EFAULT core reg $A 2M; gpu get hook.get_pages; gpu get pins; gpu get allocations'
check "... the hook's free ran; nothing pinned or allocated" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 0,0,0
check "... and no free callback reference was kept" test "$(pm_stat live_registrations)" = 0
no_leaks
check "unload" pm_down
finish
