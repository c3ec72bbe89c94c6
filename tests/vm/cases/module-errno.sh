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
# Any user can repeat that registration: the log must stay bounded (issue
# 24: a rate limit on every line an unprivileged caller can trigger).
log_mark errno-flood
flood='A=gpu alloc 1M;'
for _ in $(seq 200); do flood+=' !EOPNOTSUPP core reg $A 1M;'; done
t0=$SECONDS
check "200 more refused registrations, each EOPNOTSUPP" sim_run "$flood gpu free \$A"
# The kernel's default rate limit: 10 lines per 5 s (DEFAULT_RATELIMIT_*).
max=$((10 * ((SECONDS - t0) / 5 + 2)))
n=$(log_since errno-flood | grep -c 'does not support persistent pins')
check "... the kernel log says so at most $max times in $((SECONDS - t0)) s, not 200 (said $n times)" \
  test "$n" -ge 1 -a "$n" -le "$max"
param nvidia_p2p_sim persistent_supported 1
no_leaks
check "unload" pm_down

# The core's register returns NULL without a reason; on a core without
# /sys/kernel/mm/memory_peers only its allocation can fail (peer_mem.c):
# ENOMEM, and no line blames a client name (issue 24).
check "simulated GPU and RDMA core" sim_load || finish
param peer_core_sim fail_register 1
log_mark errno-register
fails_with "the core's register fails (its allocation): ENOMEM" 'Cannot allocate memory' insmod "$KO"
says_register_failed() {
  log_since errno-register | grep -q 'could not register the client' &&
    ! log_since errno-register | grep -qE 'holds it|printable characters'
}
check "... the log says the core could not register the client, not that a name is taken" \
  says_register_failed
check "... and the next try loads" insmod "$KO"
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
