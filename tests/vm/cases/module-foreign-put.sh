#!/bin/bash
# module-foreign-put (issue 8, defect 3): a non-persistent
# nvidia_p2p_put_pages looks the pin up in the *calling* process; from a
# forked child, a process that received the uverbs fd, or a kernel worker
# (uverbs disassociate after a device reset) it finds nothing, returns 0,
# and the pin and its free callback stay armed: the callback still comes at
# the owner's cudaFree.  The module must keep what that callback needs, and
# its module reference (rmmod refused), until then; no KASAN, no violation,
# and the pin goes away only with the cudaFree.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

REFCNT=/sys/module/peermem_rs/refcnt
check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish

# foreign HOW -- register in a simctl process, end the registration HOW (in
# another process or a kworker), check from outside while the owner still
# lives, then let the owner cudaFree.  The owner waits for $GO, not for a
# fixed time: under KASAN the checks outside can take longer than any sleep.
GO=/tmp/foreign.go
foreign() {
  local how=$1 out=/tmp/foreign.out
  rm -f $GO
  "$SIMCTL" run "A=gpu alloc 2M fragmented:2; H=core reg \$A 2M; $how; echo FOREIGN-DONE; until 1200000 read $GO; echo PINS-BEFORE-FREE; gpu get pins; gpu free \$A; echo PINS-AFTER-FREE; gpu get pins" > $out 2>&1 & local pid=$!
  if wait_line $out '^FOREIGN-DONE' $pid; then
    check "$how: the pin stays armed after the foreign put" test "$(gpu_get pins)" = 1
    # The module knows the driver's put would find nothing from here: it
    # does not make one (README, "Deregistration from another process").
    check "$how: the module made no put the driver would ignore" test "$(gpu_get foreign_puts)" = 0
    check "$how: peermem_rs keeps its module reference (rmmod would be refused)" test "$(< $REFCNT)" -ge 1
    if grep -q '^orphaned_pins ' "$STATS"; then
      check "$how: the module counts the orphaned pin" test "$(pm_stat orphaned_pins)" = 1
    fi
  else
    bad "$how: the foreign deregistration did not complete"
  fi
  : > $GO
  wait $pid; local r=$?
  sed 's/^/    /' $out
  check "$how: the owner's cudaFree ran" test $r = 0
  check "$how: pinned until the cudaFree, released by it" \
    test "$(sed -n '/^PINS-BEFORE-FREE/{n;p}' $out),$(sed -n '/^PINS-AFTER-FREE/{n;p}' $out)" = 1,0
  check "$how: no reference left after the callback" test "$(< $REFCNT)" = 0
}

foreign 'fork core dereg $H'
foreign 'handoff core'
foreign 'send-fd core'
foreign 'core disassociate $H'
check "core: one disassociate" test "$(core_get disassociated)" = 1
no_leaks
check "unload (nothing holds the module any more)" pm_down
finish
