#!/bin/bash
# host-layouts (issue 22): the modules tests/bench/hosts.sh left for each
# host layout it played on this (symbol-versioned) kernel -- Ubuntu 26.04
# with prebuilt providers, the same host after a driver upgrade, NVIDIA's
# kernels with the core inside the kernel -- load as they are, with no
# override: the providers (the simulators, installed as .ko.zst), then
# peermem-rs as the host's modprobe finds it (modprobe -d <layout>: its
# depmod data), CRC-checked by the loader, serving registrations.
# And the field's two Ubuntu failures side by side (issue 33; hosts.sh's
# doca-* layouts): NVIDIA's own nvidia-peermem, as modprobe loads it on
# the host without peermem-rs, refused with EINVAL -- a stub (doca-dkms),
# a CRC mismatch (doca-mixed) --, loading where its CRCs are right
# (doca-fixed), and peermem-rs on the same hosts, loaded and registering.
# And the fleet node's binary package (issue 33, hosts-fleet.inc).
# Skips where hosts.sh did not run (the Debian kernels: no symbol versions).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
K=$(uname -r)
HL=$PEERMEM/hosts
[ -f "$HL/ready" ] || skip "tests/bench/hosts.sh did not lay out the hosts for $K (it runs for the debug kernel)"

no_line() { ! log_since "$1" | grep -qE "$2"; } # no_line MARK ERE
SYMS_RE='symbol version|disagrees about version|Unknown symbol|no extended symbol version'
# providers NAME -- the simulated NVIDIA driver and RDMA core as host NAME
# installed them (the kernel's tree, or DKMS's updates/dkms), loaded.
providers() {
  local name=$1 d=$HL/$1/lib/modules/$K nv core reads=
  [ -d "$d" ] || { bad "$name: hosts.sh staged nothing"; return 1; }
  nv=$(find "$d" -name 'nvidia_p2p_sim.ko.zst' | head -1)
  core=$(find "$d" -name 'peer_core_sim.ko.zst' | head -1)
  pm_down > /dev/null 2>&1; sim_unload > /dev/null 2>&1
  log_mark "$name"
  [ "$(debug_kernel)" = yes ] && reads=driver_reads=0
  # shellcheck disable=SC2086 # $reads: empty or one word
  check "$name: the NVIDIA driver as installed (${nv#"$HL"/})" insmod "$nv" $reads || return 1
  check "$name: ... its persistent pair" insmod "${nv%/*}/nvidia_p2p_sim_persistent.ko.zst" || return 1
  check "$name: the peer-memory core as installed (${core#"$HL"/})" insmod "$core" variant="$(core_variant)" || return 1
}
# layout NAME OURS -- OURS: how peermem-rs is loaded (a command)
layout() {
  local name=$1 mod; shift
  providers "$name" || return
  check "$name: peermem-rs loads with no override: $*" "$@" || { log_since "$name" | tail -5; return; }
  mod=nvidia_peermem; [ -d /sys/module/$mod ] || mod=peermem_rs
  check "$name: ... the loader said nothing about symbol versions or unknown symbols" no_line "$name" "$SYMS_RE" ||
    log_since "$name" | grep -E "$SYMS_RE" | head -3
  check "$name: ... allow_unversioned is off" test "$(< /sys/module/$mod/parameters/allow_unversioned)" = N
  check "$name: ... its load line names a CRC binding" grep -qE "$mod: .*loaded: .*, binding crc: " <(log_since "$name")
  # shellcheck disable=SC2016 # simctl's own variables
  check "$name: ... and it serves registrations" sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; core dereg $H; gpu free $A'
  check "$name: rmmod $mod" rmmod $mod
  no_leaks
  sim_unload > /dev/null 2>&1
}
# nvidia NAME [ERE] -- NVIDIA's nvidia-peermem on host NAME without
# peermem-rs (hosts.sh's NAME-nvidia), loaded as modprobe loads it there:
# with ERE, refused with EINVAL and the kernel's log matching ERE; without,
# it loads.
nvidia() {
  local name=$1-nvidia re=${2:-} out rc=0
  providers "$name" || return
  out=$(modprobe -d "$HL/$name" nvidia_peermem 2>&1) || rc=$?
  if [ -z "$re" ]; then
    check "$name: NVIDIA's nvidia-peermem: modprobe nvidia_peermem loads it (exit $rc${out:+: $out})" test "$rc" = 0
    check "$name: ... the loader said nothing about symbol versions or unknown symbols" no_line "$name" "$SYMS_RE"
    check "$name: ... rmmod nvidia_peermem" rmmod nvidia_peermem
  else
    check "$name: NVIDIA's nvidia-peermem: modprobe nvidia_peermem fails with EINVAL (exit $rc: $out)" \
      test "$rc" != 0 -a -n "$(grep 'Invalid argument' <<< "$out")"
    check "$name: ... the kernel's log says: $re" grep -qE "$re" <(log_since "$name") ||
      log_since "$name" | tail -5
    check "$name: ... nothing of it stays loaded" test ! -d /sys/module/nvidia_peermem
  fi
  sim_unload > /dev/null 2>&1
}
layout ubuntu modprobe -d "$HL/ubuntu" nvidia_peermem
layout ubuntu-upgraded modprobe -d "$HL/ubuntu-upgraded" nvidia_peermem
if [ -f "$HL/nvidia-kernel/src/peermem_rs.ko" ]; then
  layout nvidia-kernel insmod "$HL/nvidia-kernel/src/peermem_rs.ko"
else
  bad "nvidia-kernel: hosts.sh staged no module"
fi
# The stub: nothing for the loader to refuse, its init refuses
# (nvidia-peermem.c 550.163.01, the #else branch of nv_mem_client_init).
nvidia doca-dkms 'nvidia-peermem nv_mem_client_init:[0-9]+ ERROR module compiled without IB peer memory symbols present'
layout doca-dkms modprobe -d "$HL/doca-dkms" nvidia_peermem
nvidia doca-fixed
nvidia doca-mixed 'nvidia_peermem: disagrees about version of symbol ib_register_peer_memory_client'
layout doca-mixed modprobe -d "$HL/doca-mixed" nvidia_peermem
# Build once, deploy to a fleet: the signed binary package (make
# deb-modules) as a node without the toolchain installed it.
layout fleet modprobe -d "$HL/fleet" nvidia_peermem
finish
