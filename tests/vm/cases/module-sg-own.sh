#!/bin/bash
# module-sg-own (issue 8, defect 1): the SG list is the client's.  With
# PEER_MEM_INVALIDATE_UNMAPS the core answers an invalidation by clearing
# its copy of the table and later calls neither dma_unmap nor put_pages,
# only release: a client that frees its list only in dma_unmap leaks it on
# every cudaFree of a registered buffer.  Repeated invalidate-then-dereg;
# on the debug kernel kmemleak must report nothing; the module's own count
# of live SG tables (`sg_tables`, where it has it) must be 0 at the end.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

# The core that honours INVALIDATE_UNMAPS (every variant but no-unmaps).
CORE_PARAMS=honour_unmaps=1
check "providers (core honouring INVALIDATE_UNMAPS) + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
s='echo start'
for i in $(seq 16); do
  s="$s; A=gpu alloc 4M fragmented:2; H=core reg \$A 4M; gpu free \$A; !ESTALE core dma-check \$H; core dereg \$H"
done
check "16 x (register 4M in 32 runs, cudaFree -> UNMAPS invalidation, dereg)" sim_run "$s; core get invalidations; core get deregs"
check "... 16 invalidations, 16 deregistrations" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 16,16
check "and a plain register/dereg (the dma_unmap path) in between" \
  sim_run 'A=gpu alloc 4M fragmented:2; H=core reg $A 4M; core dereg $H; gpu free $A'
if grep -q '^sg_tables ' "$STATS"; then
  check "the module owns no SG table any more (sg_tables 0)" test "$(pm_stat sg_tables)" = 0
else
  echo "info - the module's stats have no sg_tables line"
fi
no_leaks
check "unload" pm_down
if [ -w /sys/kernel/debug/kmemleak ]; then
  leaks=$(kmemleak_scan)
  if [ -n "$leaks" ]; then
    bad "kmemleak reports unreferenced objects (the SG lists of invalidated registrations):"
    head -n 40 <<< "$leaks"
  else
    ok "kmemleak: nothing leaked"
  fi
else
  echo "info - no kmemleak on this kernel: the leak itself is judged on the debug kernel"
fi
finish
