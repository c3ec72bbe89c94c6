#!/bin/bash
# control-lock-order (negative control, selfcheck.list): load a module that
# takes two locks in both orders.  This case must FAIL on the debug kernel,
# by lockdep.
. "${vmstage:-/peermem}/vm/lib.sh"
check "insmod control_lock_order" insmod "$MODS/control_lock_order.ko"
rmmod control_lock_order 2>/dev/null
finish
