#!/bin/bash
# stress-campaign: the seeded stress and fault campaign (simctl stress) in
# each peermem_rs mode and each core variant asked for, then the fuzz loop
# over the simulators' control devices (simctl fuzz).  After every run: the
# campaign's own end-state check (no pins, persistent pins, DMA mappings or
# core registrations left, every violation counter 0), peermem_rs has no
# live registration and nothing pinned, and everything unloads; run_case
# fails the case on any kernel-log report (KASAN, lockdep, UBSAN, kmemleak,
# hung task, WARN).  With stress_failslab=1 (a kernel with CONFIG_FAILSLAB)
# the campaign's processes run with failslab (task-filtered) failing a
# share of their slab allocations.
#
# Parameters (kernel command line of the VM, see `make stress`):
#   stress_seed=S      the seed (default: fixed for `make test`)
#   stress_ops=N       operations per run (default: small for `make test`)
#   stress_variants=a,b  core variants (default: this boot's)
#   stress_modes=a,b   peermem_rs modes (default: invalidate,persistent)
#   stress_procs=P stress_threads=T stress_failslab=0|1 stress_fuzz=N
#   stress_mps=0|1 (MPS-like lives, simctl stress --mps; on by default,
#                  `make stress MPS=0` leaves them out)
#   stress_neighbour=0|1 (the same-process neighbour of the P2P API,
#     sim_neighbour.ko, loaded beside the client in invalidate mode;
#     simctl stress --neighbour; never with STRESS_MODULE; on by default,
#     `make stress NEIGHBOUR=0` leaves it out)
# STRESS_MODULE=peermem_plant_<bug> (the plant-* negative controls) runs the
# campaign against a module with a planted bug instead (no fuzz loop);
MODES=${stress_modes:-invalidate,persistent}
. "${vmstage:-/peermem}/vm/lib.sh"
PM_MODULE=${STRESS_MODULE:-peermem_rs}
. "$CASES/module-common.inc"
CLIENT=$PM_MODULE
SEED=${stress_seed:-20261123}
if [ "$(debug_kernel)" = yes ]; then OPS=${stress_ops:-400}; else OPS=${stress_ops:-3000}; fi
PROCS=${stress_procs:-2}
THREADS=${stress_threads:-4}
VARIANTS=${stress_variants:-$(core_variant)}
# failslab (CONFIG_FAILSLAB: the debug kernel) only when asked for
# (stress_failslab=1, e.g. `make stress KVER=7.3.4-peermemdbg FAILSLAB=1`).
FAILSLAB=/sys/kernel/debug/failslab
FAILSLAB_ON=${stress_failslab:-0}
[ "$FAILSLAB_ON" = 1 ] && [ ! -d $FAILSLAB ] && skip "stress_failslab=1 but this kernel has no failslab"
BOOT_VARIANT=$(core_variant)
NEIGHBOUR=${stress_neighbour:-1}
[ -n "${STRESS_MODULE:-}" ] && NEIGHBOUR=0

# The variant pm_up loads the simulated core in (sim-common.inc asks this).
core_variant() { echo "${V:-$BOOT_VARIANT}"; }

# failslab_setup: fail 1 in 20 slab allocations of the tasks that opt in
# (/proc/PID/make-it-fail, inherited by their children), sleeping ones too,
# without the stack dumps of every failure.
failslab_setup() {
  echo Y > $FAILSLAB/task-filter
  echo N > $FAILSLAB/ignore-gfp-wait
  echo 5 > $FAILSLAB/probability
  echo 0 > $FAILSLAB/interval
  echo -1 > $FAILSLAB/times
  echo 0 > $FAILSLAB/space
  echo 0 > $FAILSLAB/verbose
}

# stress_run NAME -- one campaign run; its output in /tmp/stress-NAME.out.
stress_run() {
  local out=/tmp/stress-$1.out r=0 t0 fs=() MARK=stress-$1
  t0=$(date +%s)
  log_mark "$MARK"
  [ "$FAILSLAB_ON" = 1 ] && fs=(--failslab)
  [ "${stress_mps:-1}" = 1 ] && fs+=(--mps)
  [ "$NB" = 1 ] && fs+=(--neighbour)
  "$SIMCTL" stress --seed "$SEED" --ops "$OPS" --procs "$PROCS" --threads "$THREADS" "${fs[@]}" > "$out" 2>&1 || r=$?
  # The tally, and on a failure its seed and the `make stress` line.
  grep -E '^stress (op|seed|ok)|^STRESS-FAIL' "$out" | sed 's/^/    /'
  # A violation's log line and the simulator's WARN (its call trace),
  # before later runs' messages push them out of the kernel log.
  # (The call trace without its unreliable "?" frames.)
  [ "$r" = 0 ] || log_since "$MARK" | grep -E -A80 'contract violation' | grep -v ' ? ' | head -n 120 | sed 's/^/    /'
  echo "    ($(( $(date +%s) - t0 )) s)"
  return $r
}

[ "$FAILSLAB_ON" = 1 ] && { failslab_setup && ok "failslab armed for the campaign's processes" || bad "failslab setup"; }
echo "  seed $SEED, $OPS operations per run, $PROCS processes x $THREADS threads, core variants: $VARIANTS, modes: ${MODES//,/ }"
for V in ${VARIANTS//,/ }; do
  for mode in ${MODES//,/ }; do
    check "[$V] providers + $CLIENT mode=$mode" pm_up mode=$mode || finish
    # The neighbour in invalidate mode only: in persistent mode its late put
    # finds no pin of ours (module-neighbour), but the simulated driver
    # reports such a put of a persistent table's address as bad_args.
    NB=0; [ "$NEIGHBOUR" = 1 ] && [ "$mode" = invalidate ] && NB=1
    [ "$NB" = 1 ] && check "[$V/$mode] the same-process neighbour (sim_neighbour.ko)" insmod "$MODS/sim_neighbour.ko"
    check "[$V/$mode] campaign: seed $SEED, $OPS ops, zero violations, nothing outstanding" stress_run "$V-$mode"
    check "[$V/$mode] the campaign registered through $CLIENT" test "$(pm_stat registrations)" -gt 0
    check "[$V/$mode] no live registration left in $CLIENT" test "$(pm_stat live_registrations)" = 0
    check "[$V/$mode] nothing pinned by $CLIENT" test "$(pm_stat pinned_bytes)" = 0
    check "[$V/$mode] no SG table left in $CLIENT" test "$(pm_stat sg_tables)" = 0
    [ "$(pm_stat pinned_bytes)" = 0 ] || grep -E '^(live_reg|pinned|orphaned)' "$STATS" | sed 's/^/    /'
    # MPS-like lives (simctl stress_mps.rs): the owner's free after each
    # life fires the callback of whatever pin its exit order left armed
    # (kept registered, rust/nvidia/registry.rs).
    check "[$V/$mode] no pin left registered once the owners freed their memory (orphaned_pins 0)" test "$(pm_stat orphaned_pins)" = 0
    echo "info [$V/$mode] pids removed from P2P client lists: $(gpu_get client_pids_removed)"
    # The map and put hooks hold a call after its free while other threads
    # pin: a pin of ours given the freed table's address is redone by the
    # fence before anything uses it (a use would be map_newer_pin_kept or
    # put_released_other_pin: the campaign's violation check).  The
    # neighbour's pins are outside our fence: a map of ours meeting one is
    # its harm (map_newer_neighbour_pin, README "what no client can close"),
    # counted apart and reported below.
    echo "info [$V/$mode] maps and puts of $CLIENT that met a newer pin of $CLIENT: $(gpu_get map_newer_pin), $(gpu_get late_put_released_unmapped_pins); pins redone: $(pm_stat pins_redone)"
    if [ "$NB" = 1 ]; then
      echo "info [$V/$mode] pins of $CLIENT released by the neighbour's puts: $(gpu_get neighbour_released_pins)"
      echo "info [$V/$mode] maps of $CLIENT that met the neighbour's newer pin: $(gpu_get map_newer_neighbour_pin)"
      echo "info [$V/$mode] pins of the neighbour released by late puts of $CLIENT: $(gpu_get put_released_neighbour_pin)"
      check "[$V/$mode] sim_neighbour unloads" rmmod sim_neighbour
    fi
    no_leaks
    check "[$V/$mode] $CLIENT and the simulators unload" pm_down
  done
done
V=
# The kmemleak scan (slow under TCG) is skipped for the plants that leak
# nothing on purpose: each is caught by its own check.
scan_leaks=yes; case ${STRESS_MODULE:-} in *_plant_*) [[ $STRESS_MODULE == *leak* ]] || scan_leaks=no;; esac
if [ "$(debug_kernel)" = yes ] && [ $scan_leaks = yes ]; then
  leaks=$(kmemleak_scan)
  check "kmemleak: no unreferenced object after the campaign" test -z "$leaks" || head -n 40 <<< "$leaks"
fi
[ -n "${STRESS_MODULE:-}" ] && finish
# Bad input: the control devices answer garbage with an errno, never an oops.
check "simulators + peermem_rs loaded for the fuzz loop" pm_up mode=invalidate || finish
check "fuzz loop over the control devices (seed $SEED)" "$SIMCTL" fuzz --seed "$SEED" --iters "${stress_fuzz:-3000}"
check "fuzz: no contract violation counted" sim_check
check "fuzz: nothing pinned" test "$(gpu_get pins),$(gpu_get mappings)" = 0,0
check "everything unloads after the fuzz" pm_down
finish
