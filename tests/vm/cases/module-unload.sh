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
  t0=$(date +%s)
  # A blocking rmmod would wait for the holder (an hour): the timeout turns
  # that into a failure here instead of the case's time limit.
  fails_with "$mode: rmmod with a live MR is refused" 'in use' timeout 60 rmmod peermem_rs
  check "$mode: ... at once (not blocking)" test $(( $(date +%s) - t0 )) -le 30
  # The holder lives until killed: were it gone, the rmmod above would have
  # been judged against an MR that no longer existed.
  check "$mode: the holder was alive throughout" kill -0 $holder
  check "$mode: still loaded and serving" grep -q '^peermem_rs ' /proc/modules
  kill $holder; wait $holder 2>/dev/null
  check "$mode: the process exit deregistered the MR" test "$(pm_stat live_registrations)" = 0
  check "$mode: rmmod now succeeds" rmmod peermem_rs
  no_leaks
  check "unload the simulators" sim_unload
done
finish
