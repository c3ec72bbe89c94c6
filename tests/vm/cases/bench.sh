#!/bin/bash
# bench (make bench, not in the suite): what a registration costs with each
# peer-memory client under test, measured by `simctl bench` against the
# simulators with their latency model on.  Prints one line per measurement:
#   BENCHJSON {"client": ..., "mode": ..., "kind": "size"|"threads"|"procs", ...}
# which tests/bench/bench.sh turns into the table, the JSON and the chart.
# A benchmark never fails on speed: the case fails only if a client does
# not load or a registration fails (or the simulators count a violation).
#
# Settings come from <stage>/bench.conf (written by tests/bench/bench.sh),
# else the defaults below:
#   BENCH_CLIENTS  "KO|LABEL|PARAMS[|MODES[|SIMPARAMS]];..." (KO: a file in this
#                  kernel's module directory or an absolute path; PARAMS may
#                  say {mode} and {persistent} (1 in persistent mode, else 0);
#                  MODES: the modes of BENCH_MODES this client runs in (empty:
#                  all); SIMPARAMS: nvidia_p2p_sim parameters for it, e.g. the
#                  page-table version of the driver generation it was written for)
#   BENCH_MODES, BENCH_SIZES ("SIZE:ITERS:MEM_REGS:FREES ...": registration
#   cycles, registrations held for the memory figure, cudaFrees timed in
#   invalidate mode), BENCH_SCALE_SIZES, BENCH_SCALE_ITERS (per registrant),
#   BENCH_CONC, BENCH_LAT (nvidia_p2p_sim latency-model parameters),
#   BENCH_MIXED ("LEN LEN2 K N": N registrations of LEN alone and while another
#   process deregisters K registrations of LEN2; empty: no mixed load),
#   BENCH_GDA ("P N M": N small registrations held by P processes, then one
#   process exits holding M, as GPU-initiated networking does; empty: none)
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

[ -f "$PEERMEM/bench.conf" ] && . "$PEERMEM/bench.conf"
: "${BENCH_CLIENTS:=peermem_rs.ko|peermem_rs|mode={mode}}"
: "${BENCH_MODES:=invalidate persistent}"
: "${BENCH_SIZES:=64K:40:256:5 2M:40:64:5 64M:12:16:5 1G:5:4:5 16G:2:1:3 64G:1:1:2}"
: "${BENCH_SCALE_SIZES:=2M 1G}"
: "${BENCH_SCALE_ITERS:=6}"
: "${BENCH_CONC:=1 2 4 8}"
: "${BENCH_MIXED=2M 1G 16 40}"
: "${BENCH_GDA=4 2000 2000}"
: "${BENCH_LAT:=lat_pin_call_us=50 lat_pin_page_ns=1000 lat_unpin_page_ns=250 lat_map_page_ns=250 lat_unmap_page_ns=100}"

# The module name insmod gives a .ko file.
modname() { basename "$1" .ko | tr - _; }

bench_one() { # bench_one CLIENT MODE KIND simctl-bench-args...
  local client=$1 mode=$2 kind=$3 out; shift 3
  if out=$("$SIMCTL" bench "$@" --label "$client"); then :; else
    bad "$client $mode: simctl bench $*: $(tail -3 <<< "$out")"
  fi
  [ -n "$out" ] && echo "BENCHJSON {\"client\": \"$client\", \"mode\": \"$mode\", \"kind\": \"$kind\", ${out#\{}"
}

echo "latency model: $BENCH_LAT"
IFS=';' read -r -a clients <<< "$BENCH_CLIENTS"
for spec in "${clients[@]}"; do
  IFS='|' read -r ko label params modes simparams <<< "$spec"
  case $ko in /*) ;; *) ko=$MODS/$ko;; esac
  [ -f "$ko" ] || { bad "$label: no module $ko"; continue; }
  for mode in $BENCH_MODES; do
    [ -z "$modes" ] || [[ " ${modes//,/ } " == *" $mode "* ]] || continue
    p=${params//\{mode\}/$mode}
    p=${p//\{persistent\}/$([ "$mode" = persistent ] && echo 1 || echo 0)}
    pm_down > /dev/null 2>&1; rmmod "$(modname "$ko")" 2>/dev/null
    # shellcheck disable=SC2086 # parameter lists
    if ! { sim_load $BENCH_LAT $simparams && insmod "$ko" $p; }; then
      bad "$label $mode: loading the simulators or $ko ($p) failed"; continue
    fi
    ok "$label $mode: loaded ($(basename "$ko") $p)"
    t0=$(date +%s)
    for s in $BENCH_SIZES; do
      IFS=: read -r size iters mem frees <<< "$s"
      inval=(); [ "$mode" = invalidate ] && [ "${frees:-0}" -gt 0 ] && inval=(--inval "$frees")
      bench_one "$label" "$mode" size "$size" --iters "$iters" --ideal --mem "$mem" "${inval[@]}"
    done
    # The mixed load: 2 MiB registrations alone, then while another process
    # deregisters 1 GiB ones (BENCH_MIXED="LEN LEN2 K N"; empty: none).
    if [ -n "$BENCH_MIXED" ]; then
      read -r mlen mbeside mk miters <<< "$BENCH_MIXED"
      if out=$("$SIMCTL" bench-mixed "$mlen" --iters "${miters:-40}" --beside "$mbeside" --beside-regs "$mk" --label "$label" 2>&1); then
        echo "BENCHJSON {\"client\": \"$label\", \"mode\": \"$mode\", \"kind\": \"mixed\", ${out#\{}"
      else
        bad "$label $mode: simctl bench-mixed: $(tail -3 <<< "$out")"
      fi
    fi
    # GPU-initiated networking's shape (BENCH_GDA="P N M"; empty: none).
    if [ -n "$BENCH_GDA" ]; then
      read -r gp gn gm <<< "$BENCH_GDA"
      if out=$("$SIMCTL" bench-gda --procs "$gp" --regs "$gn" --exit-regs "$gm" --label "$label" 2>&1); then
        echo "BENCHJSON {\"client\": \"$label\", \"mode\": \"$mode\", \"kind\": \"gda\", ${out#\{}"
      else
        bad "$label $mode: simctl bench-gda: $(tail -3 <<< "$out")"
      fi
    fi
    for size in $BENCH_SCALE_SIZES; do
      for c in $BENCH_CONC; do
        bench_one "$label" "$mode" threads "$size" --iters "$BENCH_SCALE_ITERS" --threads "$c"
        bench_one "$label" "$mode" procs "$size" --iters "$BENCH_SCALE_ITERS" --procs "$c"
      done
    done
    check "$label $mode: no contract violations, nothing left pinned" \
      test "$("$SIMCTL" check > /dev/null && echo ok),$(gpu_get pins),$(gpu_get persistent_pins),$(gpu_get mappings)" = ok,0,0,0
    echo "info - $label $mode: $(( $(date +%s) - t0 )) s"
    rmmod "$(modname "$ko")" || bad "$label $mode: unload"
    sim_unload || bad "$label $mode: simulators unload"
  done
done
finish
