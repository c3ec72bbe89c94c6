#!/bin/bash
# control-load-fails (negative control, selfcheck.list): a module whose init
# returns an error, as a broken peermem_rs would.  This case must FAIL.
. "${vmstage:-/peermem}/vm/lib.sh"
check "insmod control_load_fails" insmod "$MODS/control_load_fails.ko"
finish
