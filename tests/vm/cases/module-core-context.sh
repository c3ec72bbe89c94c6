#!/bin/bash
# module-core-context: the real core gives registration ids (core_context)
# with xa_alloc_cyclic from 0: the first registration after a client
# registered gets id 0 -- a valid id, not "none" -- and a client without
# invalidation gets U32_MAX (PEER_NO_INVALIDATION_ID) for every one.  A
# client that takes 0 for "no id" never invalidates its first registration:
# after a cudaFree the HCA keeps DMAing to freed GPU memory
# (dma_after_free).  Checked for the self-test client and for peermem_rs
# (mode=invalidate: free callbacks), each freshly loaded.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
NOID=4294967295

# freed_first WHO CLIENT -- the first registration of a freshly loaded
# CLIENT gets id 0; a cudaFree of it is fenced (invalidation with id 0).
freed_first() {
  check "$1: first registration gets core_context 0; after cudaFree the HCA is fenced (ESTALE)" \
    sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dma-check $H; gpu free $A; !ESTALE core dma-check $H; core query $H; core dereg $H'
  has "^reg handle=1 client=$2 core_context=0 " || bad "$1: first id: $(grep '^reg ' <<< "$SIM_OUT")"
  has "^query handle=1 state=(invalidated|unmapped)" || bad "$1: not fenced: $(grep '^query' <<< "$SIM_OUT")"
  check "$1: the second registration gets id 1" \
    sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dereg $H'
  has "^reg handle=1 client=$2 core_context=1 " || bad "$1: second id: $(grep '^reg ' <<< "$SIM_OUT")"
  check "$1: no violation (no dma_after_free, no unknown id), no stale invalidation" \
    sim_check
  check "$1: invalidate_stale is 0" test "$(core_get invalidate_stale)" = 0
}

check "simulated GPU and core" sim_load || finish
check "simclient_good loads (invalidation)" sim_client good
freed_first simclient_good simclient_good
rmmod simclient_good
check "a client without invalidation (persistent=1) loads" sim_client good name=sim_persist persistent=1
check "... its registrations get U32_MAX ($NOID), the first as every other" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; H2=core reg $A 1M; core dereg $H; core dereg $H2'
[ "$(grep -c "^reg handle=[12] client=sim_persist core_context=$NOID " <<< "$SIM_OUT")" = 2 ] ||
  bad "ids without invalidation: $(grep '^reg ' <<< "$SIM_OUT")"
check "... no violation" sim_check
rmmod simclient_good
check "unload the simulators" sim_unload

check "peermem_rs mode=invalidate on the simulators" pm_up --no-persistent mode=invalidate || finish
freed_first peermem_rs nv_mem
check "peermem_rs counted the invalidation" test "$(pm_stat invalidations)" -ge 1
no_leaks
check "unload" pm_down

# OFED <= 24.10 (and NV-Kernels) end the invalidation notifier with an
# inverted test: a client without invalidation (mode=persistent) is
# deregistered without the mapping lock, which the core then unlocks
# unheld (a lockdep "bad unlock balance" on such a core, whatever the
# client).  Nothing else can race a persistent registration's teardown:
# peermem_rs stays correct there.
CORE_PARAMS="notifier_ne=1" check "peermem_rs mode=persistent on a core with OFED 24.10's notifier test" \
  pm_up mode=persistent || finish
check "... registrations and deregistrations work, cudaFree in between" \
  sim_run 'A=gpu alloc 2M; H=core reg $A 2M; H2=core reg $A+0x10000 1M; core dma-check $H; core dereg $H; gpu free $A; core dma-check $H2; core dereg $H2'
check "... the core deregistered them without its lock (unlock_unheld: 2)" test "$(core_get unlock_unheld)" = 2
no_leaks
check "unload" pm_down
finish
