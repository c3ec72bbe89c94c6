#!/bin/bash
# module-stress: 2 processes x 8 threads doing random register / deregister
# / DMA-check / cudaFree / cudaMalloc on shared GPU buffers, for a fixed seed
# and count, in both modes: zero contract violations, zero leaks (pins,
# mappings, registrations), and no kernel report (KASAN, lockdep, ... on the
# debug kernel).  STRESS_SEED and STRESS_ROUNDS override the defaults.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
SEED=${STRESS_SEED:-20261121}
# 25 rounds; 10 under KASAN, where a round costs five times as much and the
# stress campaign runs beside it (`make test` time).
ROUNDS=${STRESS_ROUNDS:-25}
[ "$(debug_kernel)" = yes ] && ROUNDS=${STRESS_ROUNDS:-10}
THREADS=8
SIZES=(64K 256K 1M 2M 4M)
LAYOUTS=(contiguous fragmented:2 fragmented:4 shuffled)

# gen PROCESS -- a simctl script: 4 buffers, then ROUNDS rounds of THREADS
# random statements run concurrently ('&'), each allowed to fail ('?': a
# freed VA, a stale handle), joined by 'wait'.
gen() {
  local p=$1 r t k op off len
  RANDOM=$((SEED + p))
  for t in $(seq 0 $((THREADS - 1))); do echo "set H$t 0"; done
  for k in 0 1 2 3; do echo "A$k=gpu alloc 4M ${LAYOUTS[RANDOM % 4]}"; done
  for r in $(seq $ROUNDS); do
    for t in $(seq 0 $((THREADS - 1))); do
      k=$((RANDOM % 4)); op=$((RANDOM % 10))
      len=${SIZES[RANDOM % 5]}; off=$(( (RANDOM % 16) * 0x10000 + (RANDOM % 2) * (RANDOM % 4096) ))
      case $op in
        0|1|2|3) echo "& ? H$t=core reg \$A$k+$off $len" ;;
        4|5)     echo "& ? core dereg \$H$t" ;;
        6|7)     echo "& ? core dma-check \$H$t" ;;
        8)       echo "& ? gpu free \$A$k" ;;
        9)       echo "& ? A$k=gpu alloc 4M ${LAYOUTS[RANDOM % 4]}" ;;
      esac
    done
    echo wait
  done
  echo "close core"
  echo "close gpu"
}

for mode in invalidate persistent; do
  check "providers + peermem_rs mode=$mode" pm_up mode=$mode || finish
  gen 1 > /tmp/stress-1.sim; gen 2 > /tmp/stress-2.sim
  echo "  seed $SEED, $ROUNDS rounds x $THREADS threads x 2 processes ($(grep -c '^&' /tmp/stress-1.sim) + $(grep -c '^&' /tmp/stress-2.sim) statements)"
  t0=$(date +%s)
  "$SIMCTL" script /tmp/stress-1.sim > /tmp/stress-1.out 2>&1 & p1=$!
  "$SIMCTL" script /tmp/stress-2.sim > /tmp/stress-2.out 2>&1 & p2=$!
  r1=0; r2=0; wait $p1 || r1=$?; wait $p2 || r2=$?
  check "$mode: both processes ran their scripts to the end (rc $r1, $r2, $(( $(date +%s) - t0 )) s)" test $r1 = 0 -a $r2 = 0 ||
    tail -5 /tmp/stress-1.out /tmp/stress-2.out
  regs=$(cat /tmp/stress-[12].out | grep -c '^\[bg[0-9]*\] reg handle=')
  frees=$(cat /tmp/stress-[12].out | grep -c '^\[bg[0-9]*\] freed va=')
  echo "  $regs registrations, $frees cudaFrees succeeded; peermem_rs: $(pm_stat registrations) claimed, $(pm_stat invalidations) invalidated"
  check "$mode: registrations happened" test "$regs" -gt 20
  check "$mode: no live registration left" test "$(pm_stat live_registrations)" = 0
  check "$mode: nothing pinned by peermem_rs" test "$(pm_stat pinned_bytes)" = 0
  no_leaks
  check "unload" pm_down
done
finish
