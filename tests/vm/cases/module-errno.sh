#!/bin/bash
# module-errno (issue 8, defect 7).
# - Persistent pins refused on MIG / confidential computing / vGPU come
#   back from the driver as -ENOTSUPP (524), a kernel-internal errno that
#   userspace shows as "Unknown error 524": ibv_reg_mr must fail with
#   EOPNOTSUPP, and the kernel log must name the mode that works.
# - A driver exporting nvidia_p2p_* with plain EXPORT_SYMBOL (older trees;
#   symbol_get refuses such exports since 6.6) is loaded: the module must
#   load and work, not report "the NVIDIA driver is not loaded".
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + peermem_rs mode=persistent" pm_up mode=persistent || finish
check "persistent pins unsupported (as on MIG/CC/vGPU)" param nvidia_p2p_sim persistent_supported 0
log_mark errno-enotsupp
check "ibv_reg_mr fails with EOPNOTSUPP (not 'Unknown error 524')" \
  sim_run 'A=gpu alloc 1M; !EOPNOTSUPP core reg $A 1M; gpu free $A'
check "the kernel log names mode=invalidate" bash -c "dmesg | sed -n '/VMMARK errno-enotsupp\$/,\$p' | grep -q 'mode=invalidate'"
param nvidia_p2p_sim persistent_supported 1
no_leaks
check "unload" pm_down

check "simulated GPU exporting nvidia_p2p_* with plain EXPORT_SYMBOL" sim_load --no-persistent --plain || finish
if out=$(insmod "$KO" mode=invalidate 2>&1); then
  ok "peermem_rs loads against the plain-export driver"
  check "... and registers GPU memory" \
    sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; gpu free $A; !ESTALE core dma-check $H; core dereg $H'
else
  bad "peermem_rs refuses to load: $out"
  dmesg | tail -n 5 | sed 's/^/    /'
fi
no_leaks
check "unload" pm_down
finish
