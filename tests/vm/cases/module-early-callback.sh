#!/bin/bash
# module-early-callback (issue 32, item 7): a pin's free callback runs
# before the pin call returned, and what it freed goes at once to the next
# pins.  nvidia_p2p_get_pages registers the callback and returns with
# nothing held (nv-p2p.c nv_p2p_get_pages): a cudaFree in between (`gpu hook
# get_pages_return`, which then holds the get for its whole wait: a thread
# preempted on its way out) calls the callback before the module has the
# table, and the get still succeeds with a table freed after that callback.
# That registration must fail (EFAULT: its memory is gone) and leave nothing
# behind.
#
# Meanwhile a real-time thread of another process registers on the same
# CPU: it queues at the core's peer mutex, which the first registration holds
# around the client's acquire (peer_mem.c ib_get_peer_client), and runs the
# moment it is let go, before the first thread runs again (a real-time
# wakeup preempts at once).  Its first pin gets the freed table's address
# (reuse_freed) and the client's allocations for it get what the first
# pin's callback freed: kmalloc hands a freed object to the next allocation
# of its size on that CPU, and the unbound work queues (where the client
# defers the end of its callback) run on CPU 0 during the case.  The newer
# pins must be whole: mapped, fenced by their own cudaFree (ESTALE), put by
# their own deregistration (no pin left after it), never mistaken for the
# first one.
#
# The callback finds its registration by id (rust/nvidia/registry.rs).  The
# client before the registry (bcbb405) passes this case too: its record of
# the first pin, keyed by the callback data's address, lived from the pin's
# return to its adoption, both inside that one acquire, and the core's peer
# mutex keeps every other acquire (the only pins that were recorded or
# looked up) out of it; its probe pins, made outside acquire, were neither.
# Run against it, the newer pin got the first one's table and callback data
# addresses, after that record was gone.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + $PM_MODULE mode=invalidate" pm_up mode=invalidate || finish
check "the freed table's address goes to the next pin (reuse_freed)" test "$(param nvidia_p2p_sim reuse_freed)" = Y

# CPU 0 runs both processes and the unbound work queues; this shell and
# its helpers run on the last CPU, out of the way.
last=$(($(getconf _NPROCESSORS_ONLN) - 1))
taskset -cp "$last" $$ > /dev/null
wq=/sys/devices/virtual/workqueue/cpumask
wq_was=$(cat $wq)
wq_set() { echo "$1" > $wq; }
trap 'wq_set "$wq_was"' EXIT
check "the unbound work queues on CPU 0" wq_set 1
# newer_whole -- the newer pins' process did all it should, every
# registration included.
newer_whole() { [ "$r_newer" = 0 ] && [[ $(< $newer) != *ignored-error* ]]; }

# The newer registrations start $after ms after the first one armed the
# hook (its free, callback and the callback's deferred work take a few ms),
# while its get is held $hold ms.
rounds=3 after=200 hold=700
[ "$(debug_kernel)" = yes ] && rounds=1 after=1000 hold=2500
ready=/tmp/early-callback.ready go=/tmp/early-callback.go
newer=/tmp/early-callback.newer first=/tmp/early-callback.first
frees=$(gpu_get hook_frees)
for round in $(seq $rounds); do
  rm -f $ready $go
  # The newer pins: one real-time thread registers B and C, checks both by
  # DMA, fences C's by its cudaFree, deregisters both, counts the pins
  # left, then frees B.  (`?`: a failed registration leaves its handle
  # unset; the checks below catch the failure itself.)
  # shellcheck disable=SC2016 # simctl's own variables
  taskset -c 0 chrt -f 10 "$SIMCTL" run \
    "B=gpu alloc 1M; C=gpu alloc 1M; write $ready ready; until 30000 read $go; sleep $after;" \
    '?H=core reg $B 1M; ?K=core reg $C 1M; ?core dma-check $H; ?core dma-check $K;' \
    'gpu free $C; ?!ESTALE core dma-check $K; ?core dma-check $H;' \
    '?core dereg $H; ?core dereg $K; gpu get pins; gpu free $B' > $newer 2>&1 &
  p_newer=$!
  # The first pin, once B and C are allocated: its get_pages calls back
  # (the hook frees A) and is held.
  taskset -c 0 "$SIMCTL" run "until 30000 read $ready; A=gpu alloc 1M; write $go go;" \
    "gpu hook get_pages_return 1 $hold; !EFAULT core reg \$A 1M" > $first 2>&1 &
  wait $!; r_first=$?
  wait $p_newer; r_newer=$?
  SIM_OUT=$(< $first)$'\n'$(< $newer)
  printf '    %s\n' "${SIM_OUT//$'\n'/$'\n'    }"
  check "round $round: the first pin's callback before its get returned: EFAULT" test $r_first = 0
  check "... the newer pins registered, checked by DMA, fenced by their own cudaFree" \
    newer_whole
  check "... no pin left after their deregistration" \
    test "$(grep -xE '[0-9]+' $newer | tail -1)" = 0
done
check "every hook freed its memory inside get_pages" test "$(gpu_get hook_frees)" -ge $((frees + rounds))
check "stats: nothing live, pinned or orphaned" \
  test "$(pm_stat live_registrations),$(pm_stat pinned_bytes),$(pm_stat orphaned_pins),$(pm_stat sg_tables)" = 0,0,0,0
check "stats: the early callbacks counted as revoked steps" test "$(pm_stat errors.revoked)" -ge $rounds
no_leaks
check "unload" pm_down
finish
