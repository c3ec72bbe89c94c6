#!/bin/bash
# module-stale-put (issue 16): a put_pages of ours already on its way into
# the NVIDIA driver when the pin's free callback runs must never release
# another pin.  The real driver finds a revocable pin by its page table's
# address alone and frees the table right after the callback; kmalloc hands
# that address to the next table at once (nvidia_p2p_sim: reuse_freed=1,
# LIFO).  Here the simulated driver holds the put of H on its way to its
# API lock (`gpu hook put`): cudaFree of H's memory runs (its callback, the
# table freed), then the put waits 1.5 s more while a second thread of the
# same process registers another buffer.  That pin gets the freed table's
# address and the late put releases it.  Our fence (rust/logic/fence.rs)
# sees it: the callback marked the put late, and the new pin has its
# address.  The pin is never handed on: once the late put returned it is
# put (finding nothing) and made anew, so the new MR is pinned and its DMA
# check passes; the simulated driver counts the release
# (late_put_released_unmapped_pins), and no violation, since the owner
# never mapped the released pin.  Without the fence's redo
# (tests/plants/stale_put.patch, the plant-stale-put control) the new MR
# maps the released pin: put_released_other_pin, and its DMA goes to
# unpinned memory.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + $PM_MODULE mode=invalidate" pm_up mode=invalidate || finish
check "the freed table's address goes to the next pin (reuse_freed)" test "$(param nvidia_p2p_sim reuse_freed)" = Y
r0=$(pm_stat pins_redone); l0=$(gpu_get late_put_released_unmapped_pins)
for round in 1 2; do
  sim_run 'A=gpu alloc 1M; B=gpu alloc 1M; H=core reg $A 1M; gpu hook put 1 1500;' \
          '& core dereg $H; sleep 300; H2=core reg $B 1M; wait;' \
          'gpu get hook_frees; gpu get violation.put_released_other_pin; core dma-check $H2;' \
          'gpu free $B; !ESTALE core dma-check $H2; core dereg $H2' > /tmp/stale-put.out 2>&1
  r=$?
  other=$(sed -n 's/^    //p' /tmp/stale-put.out | grep -xE '[0-9]+' | sed -n 2p)
  if [ $r = 0 ] && [ "$other" = 0 ]; then
    ok "round $round: a put late past its callback released no pin of ours that was used (put_released_other_pin=$other)"
  else
    bad "round $round: put_released_other_pin=${other:-?} (simctl rc $r)"; cat /tmp/stale-put.out
  fi
done
check "... the late put released the second registration's first pin each round (late_put_released_unmapped_pins: $l0, then +2)" \
  test "$(gpu_get late_put_released_unmapped_pins)" = "$((l0 + 2))"
check "... and each was redone (pins_redone: $r0, then +2)" test "$(pm_stat pins_redone)" = "$((r0 + 2))"
check "no contract violation" sim_check
no_leaks
check "unload" pm_down
finish
