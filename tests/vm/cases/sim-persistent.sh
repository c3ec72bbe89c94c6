#!/bin/bash
# sim-persistent: persistent pins (nvidia_p2p_get_pages_persistent, present
# with nvidia_p2p_sim_persistent.ko): no free callback; cudaFree keeps the
# memory alive until put_pages_persistent, and the VA may be reused by a new
# allocation while the old MR still points at the old pages; persistent_supported=0
# makes them fail as on MIG, vGPU or confidential computing.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/sim-common.inc"
# The self-test checks the current core's behaviour, whatever the boot's variant.
CORE_PARAMS="honour_unmaps=1 sg_page_shift=0"
[ -x "$SIMCTL" ] || { bad "no $SIMCTL"; finish; }
check "load the simulators with the persistent API" sim_load || finish
check "client with persistent=1 (registers without invalidation)" sim_client good name=sim_persist persistent=1

check "persistent registration, cudaFree, VA reused, both MRs live" sim_run '
  A=gpu alloc 2M contiguous
  H1=core reg $A 2M
  gpu get persistent_pins
  gpu free $A
  core dma-check $H1
  gpu stats
  gpu alloc 2M contiguous --at $A
  H2=core reg $A 2M
  core dma-check $H1
  core dma-check $H2
  core dereg $H1
  gpu get persistent_pins
  core dereg $H2
  gpu get persistent_pins
  gpu get allocations'
has "^reg handle=1 client=sim_persist core_context=4294967295 " && ok "core_context U32_MAX (PEER_NO_INVALIDATION_ID): not an invalidation client" || bad "core_context: $(grep "^reg " <<< "$SIM_OUT")"
has "^alloc va=0x[0-9a-f]+ len=0x200000 owner=[0-9]+ layout=contiguous runs=[0-9]+ pins=0 persistent_pins=1 mappings=1 freed=1$" &&
  ok "the freed allocation stays, held by the persistent pin" || bad "freed allocation not kept"
a1=$(sed -nE 's/^sg handle=1 idx=0 addr=(0x[0-9a-f]+) .*/\1/p' <<< "$SIM_OUT")
a2=$(sed -nE 's/^sg handle=2 idx=0 addr=(0x[0-9a-f]+) .*/\1/p' <<< "$SIM_OUT")
[ -n "$a1" ] && [ -n "$a2" ] && [ "$a1" != "$a2" ] && ok "same VA, new pages ($a1 -> $a2)" || bad "addresses $a1 $a2"
has "^dma_check handle=1 ok$" && ok "the old MR may still DMA (memory kept alive)" || bad "old MR"

param nvidia_p2p_sim persistent_supported 0
check "persistent pins unsupported (MIG, vGPU, CC): not claimed" sim_run 'A=gpu alloc 1M; !EFAULT core reg $A 1M'
param nvidia_p2p_sim persistent_supported 1

check "zero violations" sim_check
check "unload" sim_unload
finish
