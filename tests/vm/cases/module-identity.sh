#!/bin/bash
# module-identity: the module built as nvidia_peermem (Kbuild PEERMEM_NAME)
# is found by every detection path of docs/facts/peer-memory-core.md
# ("Detection": file existence, per library and version), on a core that
# creates /sys/kernel/mm/memory_peers (older MLNX_OFED, Ubuntu) and on one
# that does not (DOCA-OFED, NVIDIA's kernels); peermem_rs.ko, on the latter,
# is found by none (why the identity matters).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
NV=$MODS/nvidia_peermem.ko
MP=/sys/kernel/mm/memory_peers

# detected LIB -- whether library LIB would see a peer-memory client, by the
# paths it probes (access(F_OK)).
detected() {
  local p
  case $1 in
    nccl-2.23.4+) set -- $MP/nv_mem/version $MP/nv_mem_nc/version /sys/module/nvidia_peermem/version ;;
    nccl-2.22-)   set -- $MP/nv_mem/version $MP/nv_mem_nc/version ;;
    ucx-1.18+)    set -- $MP/nv_mem/version /sys/module/nvidia_peermem/version /sys/module/nv_peer_mem/version ;;
    ucx-1.17-)    set -- $MP/nv_mem/version ;;   # also UCC, GASNet, nvidia-fs
    nvshmem)      set -- $MP/nv_mem $MP/nvidia-peermem /sys/module/nvidia_peermem/version ;;
  esac
  for p in "$@"; do [ -e "$p" ] && return 0; done
  return 1
}
LIBS="nccl-2.23.4+ nccl-2.22- ucx-1.18+ ucx-1.17- nvshmem"

# expect "what" "LIBS that must detect" -- every other library must not.
expect() {
  local what=$1 want=" $2 " lib seen= missed= extra=
  for lib in $LIBS; do
    if detected "$lib"; then seen="$seen $lib"; case $want in *" $lib "*) ;; *) extra="$extra $lib";; esac
    else case $want in *" $lib "*) missed="$missed $lib";; esac; fi
  done
  check "$what: detected by:${seen:- none}" test -z "$missed$extra" ||
    echo "    expected: $2; missing:${missed:- -}; unexpected:${extra:- -}"
}

[ -f "$NV" ] || { bad "no $NV (the module built with PEERMEM_NAME=nvidia_peermem)"; finish; }
version=$(cat "$PEERMEM/src/$(uname -r)/VERSION" 2>/dev/null)

for sysfs in 0 1; do
  core="a core without $MP (DOCA-OFED)"; [ $sysfs = 1 ] && core="a core with $MP (older MLNX_OFED)"
  pm_down > /dev/null 2>&1
  check "simulated GPU + $core" bash -c "insmod $MODS/nvidia_p2p_sim.ko && insmod $MODS/nvidia_p2p_sim_persistent.ko && insmod $MODS/peer_core_sim.ko memory_peers=$sysfs" || finish
  check "insmod nvidia_peermem.ko" insmod "$NV" || finish
  check "... its module name is nvidia_peermem" test -d /sys/module/nvidia_peermem
  check "... /sys/module/nvidia_peermem/version is the project's version ($version)" \
    test "$(cat /sys/module/nvidia_peermem/version 2>/dev/null)" = "$version"
  check "... registered with the core as nv_mem" sim_run 'core stats'
  has '^client name=nv_mem ' || bad "no client nv_mem in the core's stats"
  check "... serves registrations" sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; core dereg $H'
  check "... stats under its own name" test -r /sys/kernel/debug/nvidia_peermem/stats
  if [ $sysfs = 1 ]; then
    expect "nvidia_peermem on $core" "$LIBS"
  else
    expect "nvidia_peermem on $core" "nccl-2.23.4+ ucx-1.18+ nvshmem"
  fi
  check "rmmod nvidia_peermem" rmmod nvidia_peermem
  check "... gone from /sys/module" test ! -e /sys/module/nvidia_peermem
  if [ $sysfs = 0 ]; then
    check "insmod peermem_rs.ko (the side-by-side name)" insmod "$KO" || finish
    expect "peermem_rs on $core" ""
    check "rmmod peermem_rs" rmmod peermem_rs
  fi
  no_leaks
  check "unload the simulators" sim_unload
done
finish
