#!/bin/bash
# module-mps-exit (issue 24, item 1): a put that returns 0 is no proof that
# the free callback is gone.  RM answers 0 both for "released" and for "not
# found among this process's P2P objects"; a process leaves the client list
# of a P2P object it was added to (REGISTER_PID, as an MPS server does for
# its clients) when its RM client is destroyed, while the pins it made stay
# armed (open-gpu-kernel-modules: rmapi/client.c -> third_party_p2p.c
# CliUnregisterFromThirdPartyP2P; nv-p2p.c nv_p2p_put_pages).  At exit the
# nvidia descriptor can be released before the verbs one: the client's put
# then "succeeds", and the owner's later cudaFree calls the callback of
# the pin.  The module must keep the pin registered (with its module
# reference: rmmod refused) until that callback ran; in the other exit
# order the put really releases the pin and nothing may stay behind.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

REFCNT=/sys/module/$PM_MODULE/refcnt
check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish

VA=0x500000000000
OWNER_GO=/tmp/mps.owner.go
CLIENT_GO=/tmp/mps.client.go

# mps ORDER ARMED -- an owner process allocates at $VA and shares it with a
# client process (gpu share), which registers it and is killed (exit with
# both control files open).  ORDER: the files the client opens, first to
# last; the kernel releases them last to first at exit (task_work runs
# LIFO), so "core gpu" releases the RM client (gpu) before the verbs file.
# ARMED: whether the client's pin is still armed after its exit (1) or
# was released by its put (0).  FAULT (an errno name, optional): the next
# get_pages fails with it -- the confirming one-page probe of the exiting
# client's put (rust/nvidia/probe.rs), which must not take one failure for
# "unreachable" and keep a pin registered that no callback will ever end.  HOOK (a
# hook site, optional, no FAULT then): the owner's cudaFree runs from inside
# the exiting client's next call at that site instead of at the end -- in
# the probe's pin (get_pages) or the probe's put (put).  Either way the free
# settles the pin (its callback, or the client's put before it): nothing
# may stay behind.  A probe made after the put took a free between the two
# for "unreachable" and kept a released pin registered.
mps() {
  local order=$1 armed=$2 fault=${3:-} hook=${4:-} first second free='gpu free $A;'
  read -r first second <<< "$order"
  rm -f $OWNER_GO $CLIENT_GO
  [ -n "$hook" ] && free=
  local hook_frees; hook_frees=$(gpu_get hook_frees)
  "$SIMCTL" run "A=gpu alloc 2M fragmented:2 --at $VA; echo ALLOCATED; until 1200000 read $OWNER_GO; echo PINS-BEFORE-FREE; gpu get pins; $free echo PINS-AFTER-FREE; gpu get pins" > /tmp/mps.owner.out 2>&1 & local owner=$!
  if ! wait_line /tmp/mps.owner.out '^ALLOCATED' $owner; then
    bad "$order: the owner did not allocate"; cat /tmp/mps.owner.out; return 1
  fi
  "$SIMCTL" run "open $first; open $second; until 1200000 read $CLIENT_GO; H=core reg $VA 2M; echo REGISTERED; sleep 3600000" > /tmp/mps.client.out 2>&1 & local client=$!
  check "$order: the owner shares its memory with the client (REGISTER_PID)" "$SIMCTL" gpu share $VA $client
  : > $CLIENT_GO
  if ! wait_line /tmp/mps.client.out '^REGISTERED' $client; then
    bad "$order: the client did not register"; cat /tmp/mps.client.out
  fi
  if [ -n "$fault" ]; then
    order="$order, probe fails once with $fault"
    check "$order: the next get_pages fails with $fault" "$SIMCTL" gpu fault get_pages 1 "$fault"
  fi
  if [ -n "$hook" ]; then
    order="$order, the owner frees from inside the client's $hook"
    check "$order: the hook is armed" "$SIMCTL" gpu hook "$hook" 1 2000
  fi
  kill -9 $client; wait $client 2>/dev/null
  sed 's/^/    client: /' /tmp/mps.client.out
  # (With HOOK the memory is gone first: no list is left to take it off.)
  [ -n "$hook" ] || check "$order: the client's exit took it off the client list" test "$(gpu_get client_pids_removed)" = 1
  check "$order: the client's pin is $([ $armed = 1 ] && echo 'still armed' || echo released) after its exit" \
    test "$(gpu_get pins)" = $armed
  check "$order: orphaned_pins $armed" test "$(pm_stat orphaned_pins)" = $armed
  if [ $armed = 1 ]; then
    check "$order: peermem_rs keeps its module reference while the callback may come (rmmod refused)" \
      test "$(< $REFCNT)" -ge 1
    fails_with "$order: rmmod is refused" 'in use' rmmod peermem_rs
  fi
  : > $OWNER_GO
  wait $owner; local r=$?
  sed 's/^/    owner: /' /tmp/mps.owner.out
  check "$order: the owner's cudaFree ran" test $r = 0
  [ -z "$hook" ] || check "$order: ... from the hook" test "$(gpu_get hook_frees)" = $((hook_frees + 1))
  check "$order: no pin left after the owner's cudaFree" \
    test "$(sed -n '/^PINS-AFTER-FREE/{n;p}' /tmp/mps.owner.out)" = 0
  check "$order: no module reference left" refcnt_settles 0
  check "$order: no pin left registered" test "$(pm_stat orphaned_pins)" = 0
  "$SIMCTL" gpu reset > /dev/null
}

mps "core gpu" 1
mps "gpu core" 0
# A transient failure (ENOMEM) and a stray EINVAL of the probe are retried
# (the EINVAL retry path, the same code, on the Debian kernels only: time).
# (The ENOMEM one on the debug kernel too: a pin kept registered for nothing is a leak.)
mps "gpu core" 0 ENOMEM
[ "$(debug_kernel)" = yes ] || mps "gpu core" 0 EINVAL
# The owner (an MPS server, a process holding a passed nvidia descriptor)
# frees while the exiting client's put is vouched for: inside the probe's
# pin everywhere; inside the probe's put (the orphaned count, no memory
# at stake) on the Debian kernels only: time.
mps "gpu core" 0 "" get_pages
[ "$(debug_kernel)" = yes ] || mps "gpu core" 0 "" put
no_leaks
check "unload (nothing holds the module any more)" pm_down
finish
