#!/bin/bash
# module-unload: rmmod is refused while MRs exist (never blocks), and is
# clean once they are gone.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

for mode in persistent invalidate; do
  check "providers + peermem_rs mode=$mode" pm_up mode=$mode || finish
  "$SIMCTL" run 'A=gpu alloc 2M; H=core reg $A 2M; echo REGISTERED; sleep 3600000' > /tmp/holder.out 2>&1 & holder=$!
  check "$mode: the holder registered its MR" wait_line /tmp/holder.out '^REGISTERED' $holder || cat /tmp/holder.out
  check "$mode: an MR is live" test "$(pm_stat live_registrations)" = 1
  # rmmod in the background: one that blocks (an exit path waiting for
  # the MR) is caught here, then released by ending the holder.
  rmmod peermem_rs > /tmp/rmmod.out 2>&1 & rm_pid=$!
  for i in $(seq 300); do kill -0 $rm_pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $rm_pid 2>/dev/null; then
    bad "$mode: rmmod with a live MR blocks (still waiting after 30 s)"
    kill $holder; wait $rm_pid; wait $holder 2>/dev/null; finish
  fi
  if wait $rm_pid; then
    bad "$mode: rmmod with a live MR succeeded"
  else
    check "$mode: rmmod with a live MR is refused at once: $(cat /tmp/rmmod.out)" grep -q 'in use' /tmp/rmmod.out
  fi
  # The holder lives until killed: were it gone, the rmmod above would have
  # been judged against an MR that no longer existed.
  check "$mode: the holder was alive throughout" kill -0 $holder
  check "$mode: still loaded and serving" grep -q '^peermem_rs ' /proc/modules
  kill $holder; wait $holder 2>/dev/null
  check "$mode: the process exit deregistered the MR" test "$(pm_stat live_registrations)" = 0
  check "$mode: rmmod now succeeds" rmmod_settled peermem_rs
  no_leaks
  check "unload the simulators" sim_unload
done
finish
