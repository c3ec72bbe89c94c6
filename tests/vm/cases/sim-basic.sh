#!/bin/bash
# sim-basic: the simulators' functional behaviour, driven through the
# well-behaved test client (tests/simclients), with zero contract
# violations: exports and their licenses, the persistent API's absence,
# per-process GPU memory in three layouts, registration with the SG list
# the HCA sees (coalescing, first/last trim), the HCA's DMA check, cudaFree
# and context teardown while registered (free callback -> invalidation),
# close of the core's file (deregistration), the v1 page table, fault
# injection, pin delay, a non-PCI dma_device, a legacy (no
# INVALIDATE_UNMAPS) client, an _ex client too short for flags, duplicate
# names and memory_peers in sysfs.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/sim-common.inc"
[ -x "$SIMCTL" ] || { bad "no $SIMCTL"; finish; }
SYMVERS=$PEERMEM/src/$(uname -r)/tests/sim/Module.symvers
G=0x10000

# --- exports (as built): names, GPL-only for the GPU, plain for the core ---
for f in get_pages put_pages free_page_table dma_map_pages dma_unmap_pages free_dma_mapping; do
  check "nvidia_p2p_$f exported GPL-only by nvidia_p2p_sim" \
    grep -qE "^0x[0-9a-f]+\s+nvidia_p2p_$f\s+\S*nvidia_p2p_sim\s+EXPORT_SYMBOL_GPL" "$SYMVERS"
done
for f in get_pages_persistent put_pages_persistent; do
  check "nvidia_p2p_$f exported GPL-only by nvidia_p2p_sim_persistent" \
    grep -qE "^0x[0-9a-f]+\s+nvidia_p2p_$f\s+\S*nvidia_p2p_sim_persistent\s+EXPORT_SYMBOL_GPL" "$SYMVERS"
done
for f in ib_register_peer_memory_client ib_unregister_peer_memory_client; do
  check "$f exported (plain) by peer_core_sim" grep -qE "^0x[0-9a-f]+\s+$f\s+\S*peer_core_sim\s+EXPORT_SYMBOL\s*$" "$SYMVERS"
done

# --- load without the persistent API (a driver < 535) ---------------------
# The self-test reads the core's memory_peers counters: a core that has them.
CORE_PARAMS="memory_peers=1 honour_unmaps=1 sg_page_shift=0"
check "load nvidia_p2p_sim and peer_core_sim (no persistent API)" sim_load --no-persistent || finish
check "/dev/nvidia_p2p_sim and /dev/peer_core_sim exist" test -c /dev/nvidia_p2p_sim -a -c /dev/peer_core_sim
check "/sys/kernel/mm/memory_peers exists" test -d /sys/kernel/mm/memory_peers
check "client with persistent=1 loads" sim_client good name=sim_persist persistent=1
check "without the persistent API its pins fail: nothing claims the range" \
  sim_run 'A=gpu alloc 1M; !EFAULT core reg $A 1M; check'
rmmod simclient_good

# --- the well-behaved client ---------------------------------------------
check "simclient_good loads (_ex client, PEER_MEM_INVALIDATE_UNMAPS)" sim_client good
P=/sys/kernel/mm/memory_peers/simclient_good
check "memory_peers/simclient_good has the core's files" \
  test -f $P/version -a -f $P/num_alloc_mrs -a -f $P/num_dealloc_mrs -a -f $P/num_reg_pages -a -f $P/num_dereg_pages -a -f $P/num_reg_bytes -a -f $P/num_dereg_bytes -a -f $P/num_free_callbacks
check "version reads 1.0" grep -qx 1.0 $P/version
fails_with "a second client named simclient_good is refused (NULL): memory_peers/ collides" "Invalid (argument|parameters)" \
  insmod "$MODS/simclient_bad.ko" name=simclient_good
check "... and the core says why" grep -q "a client named 'simclient_good' is already registered" <(dmesg | tail -20)

# ib_umem_get charges RLIMIT_MEMLOCK before the peer path; QP/CQ buffers
# never reach an invalidation client.
if command -v setpriv > /dev/null && command -v prlimit > /dev/null; then
  check "past RLIMIT_MEMLOCK without CAP_IPC_LOCK: ENOMEM; within it: fine" \
    prlimit --memlock=1048576 setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock \
      "$SIMCTL" run 'A=gpu alloc 2M; !ENOMEM core reg $A 2M; H=core reg $A 512K; core dereg $H; H=core reg $A 512K; core dereg $H'
  check "RLIMIT_MEMLOCK 0 without CAP_IPC_LOCK: EPERM (can_do_mlock)" \
    prlimit --memlock=0 setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock \
      "$SIMCTL" run 'A=gpu alloc 1M; !EPERM core reg $A 64K'
  check "the charge stays after an invalidation, until deregistration" \
    prlimit --memlock=1048576 setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock \
      "$SIMCTL" run 'A=gpu alloc 1M; B=gpu alloc 1M; H=core reg $A 768K; gpu free $A; !ESTALE core dma-check $H; !ENOMEM core reg $B 512K; core dereg $H; H=core reg $B 512K; core dereg $H'
  check "with CAP_IPC_LOCK (root) the limit does not apply" \
    prlimit --memlock=0 "$SIMCTL" run 'A=gpu alloc 1M; H=core reg $A 1M; core dereg $H'
else
  echo "info - no setpriv/prlimit: RLIMIT_MEMLOCK not checked"
fi
check "a QP/CQ buffer is not offered to an invalidation client" \
  sim_run 'A=gpu alloc 1M; core get regs_unclaimed; !EFAULT core reg $A 1M --qp; core get regs_unclaimed'
n=($(grep -xE '[0-9]+' <<< "$SIM_OUT"))
check "... counted as unclaimed" test "${n[1]:-x}" = "$(( ${n[0]:-0} + 1 ))"

# Layouts and the SG list the HCA sees (the client coalesces contiguous pages).
check "contiguous 2M: one SG entry" sim_run 'A=gpu alloc 2M contiguous; H=core reg $A 2M; core dereg $H'
has "^reg handle=1 .*nents=1$" && has "^sg handle=1 idx=0 addr=0x[0-9a-f]+ len=0x200000$" || bad "contiguous SG: $(grep ^reg <<< "$SIM_OUT")"
check "fragmented:4 2M: 8 SG entries of 256K" sim_run 'A=gpu alloc 2M fragmented:4; H=core reg $A 2M; core dereg $H'
has "^reg handle=1 .*nents=8$" && [ "$(grep -c 'len=0x40000$' <<< "$SIM_OUT")" = 8 ] || bad "fragmented SG"
check "shuffled 1M: 16 SG entries of 64K" sim_run 'A=gpu alloc 1M shuffled; H=core reg $A 1M; core dereg $H'
has "^reg handle=1 .*nents=16$" || bad "shuffled SG"
# A client with one SG entry per 64 KiB page (as nvidia-peermem does):
# over a million for 64 GiB (128K for 8 GiB on the KASAN kernel, where a
# million entries take minutes).  The core keeps them all; simctl prints only
# --sg-max of them and summarizes every one in its sgsum line.
gib=64; [ "$(debug_kernel)" = yes ] && gib=8
n=$((gib << 14))
param simclient_good coalesce 0
check "one SG entry per GPU page: $gib GiB (sparse) registered" \
  sim_run "A=gpu alloc ${gib}G sparse; H=core reg \$A ${gib}G --sg-max 4; core dma-check \$H; core dereg \$H; gpu free \$A"
check "... $n entries of 64K covering $gib GiB, 4 of them printed" \
  test "$(sg_sum 1 nents),$(sg_sum 1 total),$(sg_sum 1 sizes),$(grep -c '^sg handle=1 ' <<< "$SIM_OUT")" = "$n,$((gib << 30)),0x10000*$n,4"
param simclient_good coalesce 1
check "alloc stats show the layouts' runs" sim_run 'gpu alloc 2M contiguous; gpu alloc 2M fragmented:8; gpu alloc 2M shuffled; gpu stats'
has "layout=fragmented:8 runs=4 " && has "layout=shuffled runs=32 " || bad "runs: $(grep ^alloc <<< "$SIM_OUT")"

# Unaligned registration: the core trims the first/last entries to 4K pages.
check "unaligned registration (VA+0x1234, 0x5000 bytes)" \
  sim_run 'A=gpu alloc 1M contiguous; H=core reg $A+0x1234 0x5000; core dma-check $H; core query $H; gpu get pins; gpu get mappings; core dereg $H; gpu get pins; gpu get mappings'
has "page_size=0x10000 nents=1$" || bad "page size / nents"
[ "$(sg_total 1)" = $((0x6000)) ] && ok "the HCA sees [VA+0x1000, VA+0x7000): 0x6000 bytes" || bad "trimmed length $(sg_total 1)"
has "^sg handle=1 idx=0 addr=0x[0-9a-f]*1000 len=0x6000$" && ok "first entry starts 0x1000 into the GPU page" || bad "trim start"
check "pins/mappings 1/1 while registered, 0/0 after dereg" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 1,1,0,0

# The HCA's DMA check and cudaFree while registered.
check "cudaFree while registered: free callback -> invalidate -> fenced" \
  sim_run 'A=gpu alloc 4M fragmented:2; H=core reg $A 4M; core dma-check $H; gpu free $A; !ESTALE core dma-check $H; core query $H; gpu get free_callbacks; core get invalidations; core dereg $H; gpu get pins'
has "^query handle=1 state=invalidated" && has "^0$" || bad "state after cudaFree"
check "num_free_callbacks counts the invalidation" test "$(< $P/num_free_callbacks)" -ge 1
# The counters as the real core keeps them: num_free_callbacks and
# num_dealloc_mrs move at the invalidation, not again at deregistration;
# num_dereg_pages only on older cores (legacy_map).
check "counters around an invalidation and its deregistration" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core stats; gpu free $A; core stats; core dereg $H; core stats'
cnt() { grep "^client name=simclient_good " <<< "$SIM_OUT" | sed -n "$1p" | grep -oE " $2=[0-9]+" | cut -d= -f2; }
check "... num_free_callbacks +1 at the invalidation" test "$(cnt 2 num_free_callbacks)" = $(( $(cnt 1 num_free_callbacks) + 1 ))
check "... num_dealloc_mrs +1 at the invalidation, not at dereg" \
  test "$(cnt 2 num_dealloc_mrs),$(cnt 3 num_dealloc_mrs)" = "$(( $(cnt 1 num_dealloc_mrs) + 1 )),$(( $(cnt 1 num_dealloc_mrs) + 1 ))"
if [ "$(param peer_core_sim legacy_map)" = 0 ]; then
  check "... num_dereg_pages stays 0 (current cores)" test "$(cnt 3 num_dereg_pages)" = 0
fi

# Several registrations of one allocation; closing the GPU context frees it.
check "closing the GPU context invalidates every registration of it" \
  sim_run 'A=gpu alloc 2M; H1=core reg $A 1M; H2=core reg $A+1M 1M; H3=core reg $A 2M; close gpu; !ESTALE core dma-check $H1; !ESTALE core dma-check $H2; !ESTALE core dma-check $H3; core get registrations'
# Closing the core's file deregisters everything it registered.
check "closing the core's file deregisters (pins drop to 0)" \
  sim_run 'A=gpu alloc 2M; core reg $A 1M; core reg $A 2M; gpu get pins; close core; gpu get pins; core get registrations'
has "^2$" && has "^0$" || bad "pins before/after close"

# sysfs counters.
check "num_alloc_mrs == num_dealloc_mrs == regs so far" test "$(< $P/num_alloc_mrs)" = "$(< $P/num_dealloc_mrs)"
check "num_reg_bytes == num_dereg_bytes" test "$(< $P/num_reg_bytes)" = "$(< $P/num_dereg_bytes)"

# v1 page tables (32 bytes: a client reading `flags` is caught by KASAN).
param nvidia_p2p_sim pt_version 0x00010002
check "with v1 (0x00010002) page tables" sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dma-check $H; gpu get pt_version; core dereg $H'
has "^0x00010002$" || bad "pt_version not v1"
param nvidia_p2p_sim pt_version 0x00020000

# Fault injection and pin delay.
check "get_pages fault: the client does not claim the range" \
  sim_run 'A=gpu alloc 1M; gpu fault get_pages 1 ENOMEM; !EFAULT core reg $A 1M; H=core reg $A 1M; core dereg $H; gpu get faults_injected'
check "dma_map fault: registration fails with the injected errno" \
  sim_run 'A=gpu alloc 1M; gpu fault dma_map 1 EIO; !EIO core reg $A 1M; gpu get pins; H=core reg $A 1M; core dereg $H'
has "^0$" || bad "pin left after a failed registration"
param peer_core_sim fail_mkey 1
check "the HW driver fails the MR (mkey) after MAPPED: ENOMEM, unwound (dma_unmap, put_pages, release)" \
  sim_run 'A=gpu alloc 1M; !ENOMEM core reg $A 1M; gpu get pins; gpu get mappings; H=core reg $A 1M; core dereg $H'
check "... nothing left pinned or mapped; the injection is spent" \
  test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,),$(param peer_core_sim fail_mkey)" = 0,0,0
t0=$(date +%s%N)
check "pin delay 2ms per 64K page" sim_run 'A=gpu alloc 4M; gpu delay 2000; H=core reg $A 4M; gpu delay 0; core dereg $H'
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $ms -ge 128 ] && ok "64 pages took ${ms} ms (>= 128)" || bad "pin delay: ${ms} ms"

# A non-PCI dma_device: a correct client refuses it cleanly.
param peer_core_sim hca_nonpci 1
check "hca_nonpci=1: the client refuses the non-PCI device (EOPNOTSUPP)" \
  sim_run 'A=gpu alloc 1M; !EOPNOTSUPP core reg $A 1M; core get hca'
param peer_core_sim hca_nonpci 0

# A legacy client (no INVALIDATE_UNMAPS): the core re-enters it from invalidate.
check "legacy client (unmaps=0) loads beside" sim_client bad name=sim_legacy unmaps=0
rmmod simclient_good
check "legacy client: cudaFree while registered, dma_unmap/put_pages from inside invalidate" \
  sim_run 'A=gpu alloc 2M; H=core reg $A 2M; gpu free $A; !ESTALE core dma-check $H; core query $H; core dereg $H; gpu get pins'
has "^query handle=1 state=unmapped" || bad "legacy client: state after cudaFree $(grep ^query <<< "$SIM_OUT")"
check "the legacy client's version has no _ex marker" grep -qx 1.0 /sys/kernel/mm/memory_peers/sim_legacy/version
rmmod simclient_bad

# An _ex client whose ex_size (144) is below 148: the core ignores its flags.
check "_ex client with ex_size=144 loads" sim_client bad name=sim_short ex_size=144
check "the core read ex_size but not flags" sim_run 'core stats'
has "^client name=sim_short version=1.0 ex_size=144 flags=0x0 invalidation=1 " || bad "$(grep '^client' <<< "$SIM_OUT")"
check "... so it is driven as a legacy client (dma_unmap/put_pages from invalidate)" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; gpu free $A; !ESTALE core dma-check $H; core dereg $H; gpu get pins'

check "zero violations in both simulators" sim_check
check "unload clients and simulators" sim_unload
check "memory_peers removed with the core" test ! -e /sys/kernel/mm/memory_peers
finish
