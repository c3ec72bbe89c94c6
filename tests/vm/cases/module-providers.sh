#!/bin/bash
# module-providers: peermem_rs finds its providers by name at load time and
# explains every missing or conflicting one in one log line: no NVIDIA
# driver, a taken client name refused by a core with memory_peers (or
# refuse_duplicate_names), bad parameters; the mode it picks (auto:
# persistent when the driver has the persistent API, else invalidate); the
# client name seen in /sys/kernel/mm/memory_peers; references held on the
# providers while loaded.  Other peer-memory clients are not its business
# (issue 32): on a core that accepts a second client of a name (DOCA-OFED
# 25.10) it loads beside nv_peer_mem or another peermem-rs build in either
# order, and the client registered first serves -- packaging keeps them
# apart (Conflicts, modprobe.d) and peermem-probe doctor reports them.
# shellcheck disable=SC2016 # simctl's own variables (sim_run)
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

# The RDMA core without the NVIDIA driver.
check "peer_core_sim alone" insmod "$MODS/peer_core_sim.ko" || finish
log_mark nonv
binding=$(modinfo -F binding "$KO")
case $binding in
  *"weak: "*NVIDIA*|"weak: no provider"*)
    fails_with "without the NVIDIA driver: ENODEV" 'No such device' insmod "$KO"
    check "... one line says which symbol is missing and to load nvidia first" \
      grep -qE 'peermem_rs: the NVIDIA driver is not loaded \(nvidia_p2p_get_pages is exported by no loaded module\): load nvidia first' <(log_since nonv) ;;
  *) # Built against the driver's symvers: strong references, which the
     # loader refuses without the driver (module-load checks that).
     echo "info - $binding: no load without the NVIDIA driver to test here" ;;
esac
rmmod peer_core_sim

# This part checks the memory_peers entries: a core that creates them
# (module-identity covers cores with and without).
CORE_PARAMS=memory_peers=1
check "simulated GPU (with the persistent API) and a core with memory_peers" sim_load || finish
unset CORE_PARAMS
log_mark params
fails_with "mode=bogus: EINVAL" 'Invalid' insmod "$KO" mode=bogus
check "... and the log names the valid modes" grep -q 'mode=bogus is not one of auto, persistent, invalidate' <(log_since params)
long=$(printf 'n%.0s' $(seq 70))
fails_with "a 70-character client name: EINVAL" 'Invalid' insmod "$KO" peer_client_name=$long
check "... and the log says why" grep -q 'peer_client_name must be 1 to 63 printable characters' <(log_since params)

# no_name_advice MARK... -- no log line since the marks recommends setting
# peer_client_name (a client under another name loads and serves nothing
# while another client registered first).
no_name_advice() {
  local m
  ! for m; do log_since "$m"; done | grep -q 'peer_client_name'
}

# A client of the same name is already registered (nvidia-peermem, say):
# this core (memory_peers=1) refuses the name.
check "another client registers as nv_mem" sim_client good name=nv_mem
log_mark dup
fails_with "duplicate client name refused by the core: EBUSY" 'busy' insmod "$KO"
check "... the log says another client holds the name: unload it" \
  grep -qE "refused the client name 'nv_mem': another loaded peer-memory client holds it .*unload that client first" <(log_since dup)
check "... and recommends no other name (it would load and serve nothing)" \
  no_name_advice dup
rmmod simclient_good

# auto with the persistent API: persistent.
log_mark auto
check "insmod (auto, persistent API present)" insmod "$KO"
check "auto picked persistent, and says so" grep -qE "peermem_rs: version .* loaded: client 'nv_mem', mode persistent \(auto\)" <(log_since auto)
check "the load line names the binding ($binding: the bench builds against the simulators' symvers where the kernel has symbol versions)" \
  grep -qF ", binding $binding)" <(log_since auto)
check "/sys/kernel/mm/memory_peers/nv_mem/version exists (NCCL/UCX detection)" test -f /sys/kernel/mm/memory_peers/nv_mem/version
check "its version is ours" grep -qx "$(cat "$PEERMEM/src/$(uname -r)/VERSION")" /sys/kernel/mm/memory_peers/nv_mem/version
check "stats say mode persistent" test "$(pm_stat mode)" = persistent
fails_with "the providers cannot be unloaded under it" 'in use' rmmod nvidia_p2p_sim
check "rmmod peermem_rs" rmmod peermem_rs
check "its memory_peers entry is gone" test ! -e /sys/kernel/mm/memory_peers/nv_mem

# Explicit modes and a custom name.
log_mark inv
check "insmod mode=invalidate peer_client_name=gdr_test" insmod "$KO" mode=invalidate peer_client_name=gdr_test
check "mode invalidate, client gdr_test" grep -qE "loaded: client 'gdr_test', mode invalidate$" <(log_since inv | sed 's/ (kernel .*//')
check "memory_peers/gdr_test exists" test -d /sys/kernel/mm/memory_peers/gdr_test
check "rmmod" rmmod peermem_rs

# doctor WHAT ERE... -- `peermem-probe doctor` (the place where other
# peer-memory clients are reported, issue 32) prints a line matching each
# ERE.  Without the staged probe (a run that built no userspace) it says so.
P=$BIN/peermem-probe
doctor() {
  local what=$1 out re; shift
  [ -x "$P" ] || { echo "info - $P is not staged: $what not checked"; return 0; }
  out=$("$P" doctor 2>&1)
  for re; do
    grep -qE "$re" <<< "$out" || { echo "    doctor has no line /$re/:"; grep -E '^(modules|memory_peers) ' <<< "$out" | sed 's/^/    | /'; return 1; }
  done
}
# Another client under another name registered first: this core takes both
# names, asks nv_mem first, and peermem_rs under gdr_test serves nothing.
check "an nv_mem client (simclient_good), then peermem_rs as gdr_test: both registered" \
  bash -c "insmod $MODS/simclient_good.ko name=nv_mem && insmod $KO peer_client_name=gdr_test"
check "... GPU memory goes to nv_mem (registered first)" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dereg $H'
check "... (peermem_rs registrations: 0)" test "$(pm_stat registrations)" = 0
check "... doctor: two registered clients, and gdr_test serves nothing" \
  doctor "the memory_peers rows" '^memory_peers +registered clients +WARN +(nv_mem \+ gdr_test|gdr_test \+ nv_mem)$' \
    '^memory_peers +gdr_test +WARN +version .*, serves nothing$' '^memory_peers +nv_mem +info '
check "rmmod both" bash -c "rmmod peermem_rs && rmmod simclient_good"
check "unload the simulators" sim_unload

# A core that accepts a second client of a name and asks the clients in
# registration order (DOCA-OFED 25.10, no memory_peers).
CORE_PARAMS="memory_peers=0 refuse_duplicate_names=0"
check "a core that accepts duplicate client names" sim_load || finish
unset CORE_PARAMS
# An nv_mem client whose module is no known competitor goes unseen: the
# core takes both and asks the first loaded (the residual, README).
check "nv_mem of an unknown module (simclient_good), then peermem_rs: both registered" \
  bash -c "insmod $MODS/simclient_good.ko name=nv_mem && insmod $KO"
check "... GPU memory goes to the first registered: peermem_rs is never asked" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dereg $H'
check "... (peermem_rs registrations: 0)" test "$(pm_stat registrations)" = 0
check "rmmod both" bash -c "rmmod peermem_rs && rmmod simclient_good"
# A competitor's module loaded first: peermem_rs does not look for it and
# loads; the core asks nv_peer_mem first, so peermem_rs serves nothing (the
# doctor's row "more than one GPU peer-memory client", probe-doctor).
check "nv_peer_mem (a competitor, client nv_mem) loads" insmod "$MODS/nv_peer_mem.ko" unmaps=0
log_mark comp
check "peermem_rs after nv_peer_mem: loads (the core accepts a second nv_mem)" insmod "$KO"
check "... the core has both clients" test "$(core_get clients)" = 2
check "... the module refused nothing and named no other module" \
  no_log_line 'peermem_rs: the loaded module|exports duplicate symbol' comp
check "... GPU memory goes to nv_peer_mem (registered first)" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dereg $H'
check "... (peermem_rs registrations: 0)" test "$(pm_stat registrations)" = 0
check "... doctor: two peer-memory client modules loaded, FAIL" \
  doctor "the peer-memory clients row" '^modules +peer-memory clients +FAIL +peermem_rs \+ nv_peer_mem$'
check "rmmod both" bash -c "rmmod peermem_rs && rmmod nv_peer_mem"
# The competitor loaded after us: the core accepts it, and asks it only
# for what we decline (registration order).
check "peermem_rs, then nv_peer_mem: the core accepts the second nv_mem" \
  bash -c "insmod $KO && insmod $MODS/nv_peer_mem.ko unmaps=0"
check "... GPU memory is still served by peermem_rs (registered first)" \
  sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dma-check $H; core dereg $H'
check "... (peermem_rs registrations: 1)" test "$(pm_stat registrations)" = 1
check "rmmod both" bash -c "rmmod nv_peer_mem && rmmod peermem_rs"
# A second copy of ours under another module name (the build named
# nvidia_peermem): no exported symbol of ours collides any more, so the
# module loader takes both, in either order; the one registered first
# serves.  (A core with memory_peers refuses the second client name:
# module-contenders.)
if [ -f "$MODS/nvidia_peermem.ko" ]; then
  log_mark twins
  check "peermem_rs, then nvidia_peermem (ours under its other name): both load" \
    bash -c "insmod $KO && insmod $MODS/nvidia_peermem.ko"
  check "... no duplicate export refused either" no_log_line 'exports duplicate symbol' twins
  check "... GPU memory is served by peermem_rs (registered first)" \
    sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dma-check $H; core dereg $H'
  check "... (peermem_rs registrations: 1)" test "$(pm_stat registrations)" = 1
  check "rmmod both" bash -c "rmmod nvidia_peermem && rmmod peermem_rs"
  check "nvidia_peermem, then peermem_rs: both load" \
    bash -c "insmod $MODS/nvidia_peermem.ko && insmod $KO"
  check "... GPU memory goes to nvidia_peermem (registered first): peermem_rs is never asked" \
    sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dereg $H'
  check "... (peermem_rs registrations: 0)" test "$(pm_stat registrations)" = 0
  check "rmmod both" bash -c "rmmod peermem_rs && rmmod nvidia_peermem"
else
  bad "no $MODS/nvidia_peermem.ko"
fi
# The knob: this core refusing duplicate names as memory_peers cores do,
# but without the directory.  The NULL then carries no trace of a name
# taken: the module says the core could not register it, and blames no
# name (issue 24: it names a taken name only where memory_peers shows it).
param peer_core_sim refuse_duplicate_names 1
check "refuse_duplicate_names=1: an nv_mem client of an unknown module" sim_client good name=nv_mem
log_mark knob
fails_with "peermem_rs: the core returns NULL, no name listed (ENOMEM)" 'Cannot allocate memory' insmod "$KO"
check "... the log says the core could not register it" \
  grep -qE "could not register the client 'nv_mem'" <(log_since knob)
rmmod simclient_good
param peer_core_sim refuse_duplicate_names 0
check "zero contract violations" sim_check
check "unload the simulators" sim_unload

# No persistent API (a driver older than 535).
check "simulated GPU without the persistent API" sim_load --no-persistent || finish
log_mark nopers
check "insmod (auto)" insmod "$KO"
check "auto picked invalidate" grep -qE "mode invalidate \(auto\)" <(log_since nopers)
check "rmmod" rmmod peermem_rs
log_mark forced
fails_with "mode=persistent without the persistent API: EINVAL" 'Invalid' insmod "$KO" mode=persistent
check "... and the log says which driver is needed" grep -q 'has no persistent P2P API (driver 535 or later)' <(log_since forced)
check "zero contract violations" sim_check
check "unload" pm_down
finish
