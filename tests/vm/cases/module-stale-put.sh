#!/bin/bash
# module-stale-put (issue 16): a put_pages of ours already on its way into
# the NVIDIA driver when the pin's free callback runs must never release
# another pin.  The real driver finds a revocable pin by its page table's
# address alone and frees the table right after the callback; kmalloc hands
# that address to the next table at once (nvidia_p2p_sim: reuse_freed=1,
# LIFO).  Here the simulated driver holds the put of H on its way to its
# API lock (`gpu hook put`): cudaFree of H's memory runs (its callback, the
# table freed), then the put waits 1.5 s more while a second thread of the
# same process registers another buffer.  Our pin/put gate keeps that pin
# out of the driver until the late put returned (it found no pin), so the
# new pin is never the one the late put names.  Without the gate
# (tests/plants/stale_put.patch, the plant-stale-put control) the new pin gets
# the freed table's address and the late put releases it:
# put_released_other_pin, and the new MR's DMA goes to unpinned memory.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + $PM_MODULE mode=invalidate" pm_up mode=invalidate || finish
check "the freed table's address goes to the next pin (reuse_freed)" test "$(param nvidia_p2p_sim reuse_freed)" = Y
for round in 1 2; do
  sim_run 'A=gpu alloc 1M; B=gpu alloc 1M; H=core reg $A 1M; gpu hook put 1 1500;' \
          '& core dereg $H; sleep 300; H2=core reg $B 1M; wait;' \
          'gpu get hook_frees; gpu get violation.put_released_other_pin; core dma-check $H2;' \
          'gpu free $B; !ESTALE core dma-check $H2; core dereg $H2' > /tmp/stale-put.out 2>&1
  r=$?
  other=$(sed -n 's/^    //p' /tmp/stale-put.out | grep -xE '[0-9]+' | sed -n 2p)
  if [ $r = 0 ] && [ "$other" = 0 ]; then
    ok "round $round: a put late past its callback released no other pin (put_released_other_pin=$other)"
  else
    bad "round $round: put_released_other_pin=${other:-?} (simctl rc $r)"; cat /tmp/stale-put.out
  fi
done
check "... the second registration waited at the gate" test "$(pm_stat gate_waits)" -ge 2
no_leaks
check "unload" pm_down
finish
