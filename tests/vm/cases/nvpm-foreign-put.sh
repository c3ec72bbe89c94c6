#!/bin/bash
# nvpm-foreign-put (control, must fail: the module lets go of an armed pin):
# a deregistration from another process (a forked child that inherited the
# uverbs file; a kernel worker's, after a device reset, is the same for the
# driver).  The driver's non-persistent put looks the pin up in the calling
# process: from the child it finds nothing, returns 0, and the pin and its
# free callback stay armed until the owner's cudaFree.  nvidia-peermem
# ignores the put's outcome (peermem.c:349-351) and its release frees the
# context the callback was given and drops its module reference
# (peermem.c:376-387): the module can be unloaded under an armed callback,
# and the cudaFree's callback reads the freed context (peermem.c:129-131; a
# KASAN use-after-free on the debug kernel, "detected invalid context" on
# the others).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"

check "simulators (page tables v1) + NVIDIA's nvidia-peermem" nvpm_up || finish
log_mark nvpm-fp
check "deregistration from a forked child, then the owner's cudaFree" \
  sim_run 'A=gpu alloc 2M fragmented:2; H=core reg $A 2M; fork core dereg $H; echo ARMED; gpu get pins; read /sys/module/nvidia_peermem/refcnt; gpu free $A; sleep 500; echo FREED; gpu get pins'
armed=$(sed -n '/^ARMED$/{n;p}' <<< "$SIM_OUT"); ref=$(sed -n '/^ARMED$/{n;n;p}' <<< "$SIM_OUT")
if [ "$armed" = 1 ]; then
  echo "info - the foreign put left the pin armed"
  check "the client keeps its module reference while its pin stays armed (refcnt $ref)" test "${ref:-0}" -ge 1
else
  ok "the foreign put released the pin"
fi
check "the cudaFree released everything" test "$(sed -n '/^FREED$/{n;p}' <<< "$SIM_OUT")" = 0
errs=$(log_since nvpm-fp | grep -E 'nvidia-peermem .*ERROR' | head -n 1)
if [ -n "$errs" ]; then bad "the client's free callback did not find its context: $errs"; else ok "the client's free callback found its context"; fi
no_leaks
check "unload" pm_down
finish
