#!/bin/bash
# control-uaf (negative control, selfcheck.list): load a module with a planted
# use-after-free.  This case must FAIL on the debug kernel, by KASAN.
. "${vmstage:-/peermem}/vm/lib.sh"
check "insmod control_uaf" insmod "$MODS/control_uaf.ko"
rmmod control_uaf 2>/dev/null
finish
