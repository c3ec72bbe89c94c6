#!/bin/bash
# plant-use-after-callback: negative control (tests/vm/selfcheck.list, never in
# suite.list) against peermem_plant_use_after_callback.ko, the module built
# with tests/plants/use_after_callback.patch.  It MUST fail, for KASAN's
# report in touch_stale:
#  1. one registration whose memory is freed under it, then deregistered:
#     the release after the free callback reads the freed table, whatever
#     the schedule (that the plant is reached at all);
#  2. the stress campaign against the same module: it has to catch the
#     planted bug itself (tests/vm/selfcheck.list wants its count of
#     KASAN reports, printed below, above 0).
export STRESS_MODULE=peermem_plant_use_after_callback PM_MODULE=peermem_plant_use_after_callback
. "${vmstage:-/peermem}/vm/lib.sh"
[ -f "$MODS/$PM_MODULE.ko" ] || { echo "FAIL - $PM_MODULE.ko was not built"; exit 1; }
. "$CASES/module-common.inc"
log_mark plant-use-after-callback-free
check "$PM_MODULE mode=invalidate" pm_up mode=invalidate || finish
check "cudaFree under a registration, then dereg" \
  sim_run 'A=gpu alloc 2M; H=core reg $A 2M; gpu free $A; core dereg $H'
check "... unload" pm_down
UAF_RE='BUG: KASAN: .*use-after-free in .*touch_stale'
echo "info KASAN use-after-free reports in touch_stale after the free and dereg: $(log_since plant-use-after-callback-free | grep -cE "$UAF_RE")"
# The invalidating mode only: the one with free callbacks (and cheap on
# the debug kernel, where `make test` runs the negative controls).
export stress_modes=invalidate stress_ops=${stress_ops:-400} stress_failslab=${stress_failslab:-0}
log_mark plant-use-after-callback-campaign
bash "$CASES/stress-campaign.sh" || rc=1
echo "info KASAN use-after-free reports in touch_stale during the campaign: $(log_since plant-use-after-callback-campaign | grep -cE "$UAF_RE")"
finish
