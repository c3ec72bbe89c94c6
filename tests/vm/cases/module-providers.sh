#!/bin/bash
# module-providers: peermem_rs finds its providers by name at load time and
# explains every missing or conflicting one in one log line: no NVIDIA
# driver, a taken client name, bad parameters; the mode it picks (auto:
# persistent when the driver has the persistent API, else invalidate); the
# client name seen in /sys/kernel/mm/memory_peers; references held on the
# providers while loaded.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

# The RDMA core without the NVIDIA driver.
check "peer_core_sim alone" insmod "$MODS/peer_core_sim.ko" || finish
log_mark nonv
fails_with "without the NVIDIA driver: ENODEV" 'No such device' insmod "$KO"
check "... one line says which symbol is missing and to load nvidia first" \
  grep -qE 'peermem_rs: the NVIDIA driver is not loaded \(nvidia_p2p_get_pages is exported by no loaded module\): load nvidia first' <(log_since nonv)
rmmod peer_core_sim

check "simulated GPU (with the persistent API) and core" sim_load || finish
log_mark params
fails_with "mode=bogus: EINVAL" 'Invalid' insmod "$KO" mode=bogus
check "... and the log names the valid modes" grep -q 'mode=bogus is not one of auto, persistent, invalidate' <(log_since params)
long=$(printf 'n%.0s' $(seq 70))
fails_with "a 70-character client name: EINVAL" 'Invalid' insmod "$KO" peer_client_name=$long
check "... and the log says why" grep -q 'peer_client_name must be 1 to 63 printable characters' <(log_since params)

# A client of the same name is already registered (nvidia-peermem, say).
check "another client registers as nv_mem" sim_client good name=nv_mem
log_mark dup
fails_with "duplicate client name: EBUSY" 'busy' insmod "$KO"
check "... the log points at nvidia-peermem / nv_peer_mem" \
  grep -qE "refused the client name 'nv_mem': it is probably taken by nvidia-peermem or nv_peer_mem" <(log_since dup)
rmmod simclient_good

# auto with the persistent API: persistent.
log_mark auto
check "insmod (auto, persistent API present)" insmod "$KO"
check "auto picked persistent, and says so" grep -qE "peermem_rs: version .* loaded: client 'nv_mem', mode persistent \(auto\)" <(log_since auto)
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
