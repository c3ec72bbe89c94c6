#!/bin/bash
# module-early-callback (issue 32, item 7): a pin's free callback runs
# before the pin call returned.  nvidia_p2p_get_pages registers the callback
# and returns with nothing held (nv-p2p.c nv_p2p_get_pages): a cudaFree in
# between (`gpu hook get_pages_return`) calls the callback before the module
# has the table, and the get still succeeds with a table freed after that
# callback.  The freed table's address then goes at once to the next pins
# (reuse_freed), made by other threads of the process waiting at the gate
# meanwhile.  The registration must fail (EFAULT: its memory is gone) and
# leave nothing behind; the pins that get the address next must be whole:
# mapped, fenced by their own cudaFree (ESTALE), put by their own
# deregistration, never mistaken for the first one.  The callback finds its
# registration by id (rust/nvidia/registry.rs); before, a record keyed by
# the table's address stood between the pin and its adoption, where a newer
# pin at the same address could match it.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + $PM_MODULE mode=invalidate" pm_up mode=invalidate || finish
check "the freed table's address goes to the next pin (reuse_freed)" test "$(param nvidia_p2p_sim reuse_freed)" = Y
rounds=8
[ "$(debug_kernel)" = yes ] && rounds=4
for round in $(seq $rounds); do
  # Two threads register 300 ms after the first one, whose get_pages the
  # hook's free holds meanwhile (at most 2 s); each newer MR is checked by
  # DMA, fenced by its cudaFree and deregistered.
  check "round $round: the first pin's callback before its get returned, two pins next" \
    sim_run 'A=gpu alloc 1M; B=gpu alloc 1M; C=gpu alloc 1M; gpu hook get_pages_return 1 2000;' \
      '& !EFAULT core reg $A 1M; sleep 300;' \
      '& H=core reg $B 1M; & K=core reg $C 1M; wait;' \
      'gpu get hook_frees; core dma-check $H; core dma-check $K;' \
      'gpu free $B; !ESTALE core dma-check $H; core dma-check $K; gpu free $C; !ESTALE core dma-check $K;' \
      'core dereg $H; core dereg $K; gpu get pins'
  check "... nothing pinned after it" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | tail -1)" = 0
done
check "every hook freed its memory inside get_pages" test "$(gpu_get hook_frees)" -ge $rounds
check "stats: nothing live, pinned or orphaned" \
  test "$(pm_stat live_registrations),$(pm_stat pinned_bytes),$(pm_stat orphaned_pins),$(pm_stat sg_tables)" = 0,0,0,0
check "stats: the early callbacks counted as revoked steps" test "$(pm_stat errors.revoked)" -ge $rounds
no_leaks
check "unload" pm_down
finish
