#!/bin/bash
# host-layouts (issue 22): the modules tests/bench/hosts.sh left for each
# host layout it played on this (symbol-versioned) kernel -- Ubuntu 26.04
# with prebuilt providers, the same host after a driver upgrade, NVIDIA's
# kernels with the core inside the kernel -- load as they are, with no
# override: the providers (the simulators, installed as .ko.zst), then
# peermem-rs as the host's modprobe finds it (modprobe -d <layout>: its
# depmod data), CRC-checked by the loader, serving registrations.
# Skips where hosts.sh did not run (the Debian kernels: no symbol versions).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
K=$(uname -r)
HL=$PEERMEM/hosts
[ -f "$HL/ready" ] || skip "tests/bench/hosts.sh did not lay out the hosts for $K (it runs for the debug kernel)"

no_line() { ! log_since "$1" | grep -qE "$2"; } # no_line MARK ERE
# layout NAME OURS -- OURS: how peermem-rs is loaded (a command)
layout() {
  local name=$1 d=$HL/$1/lib/modules/$K mod; shift
  [ -d "$d" ] || { bad "$name: hosts.sh staged nothing"; return; }
  local nv core
  nv=$(find "$d/kernel" -name 'nvidia_p2p_sim.ko.zst' | head -1)
  core=$(find "$d/kernel" -name 'peer_core_sim.ko.zst' | head -1)
  pm_down > /dev/null 2>&1; sim_unload > /dev/null 2>&1
  log_mark "$name"
  local reads=; [ "$(debug_kernel)" = yes ] && reads=driver_reads=0
  # shellcheck disable=SC2086 # $reads: empty or one word
  check "$name: the NVIDIA driver as installed (${nv#"$HL"/})" insmod "$nv" $reads || return
  check "$name: ... its persistent pair" insmod "${nv%/*}/nvidia_p2p_sim_persistent.ko.zst" || return
  check "$name: the peer-memory core as installed (${core#"$HL"/})" insmod "$core" variant="$(core_variant)" || return
  check "$name: peermem-rs loads with no override: $*" "$@" || { log_since "$name" | tail -5; return; }
  mod=nvidia_peermem; [ -d /sys/module/$mod ] || mod=peermem_rs
  check "$name: ... the loader said nothing about symbol versions or unknown symbols" \
    no_line "$name" 'symbol version|disagrees about version|Unknown symbol|no extended symbol version' ||
    log_since "$name" | grep -E 'symbol version|disagrees about version|Unknown symbol|no extended symbol version' | head -3
  check "$name: ... allow_unversioned is off" test "$(< /sys/module/$mod/parameters/allow_unversioned)" = N
  check "$name: ... its load line names a CRC binding" grep -qE "$mod: .*loaded: .*, binding crc: " <(log_since "$name")
  # shellcheck disable=SC2016 # simctl's own variables
  check "$name: ... and it serves registrations" sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; core dereg $H; gpu free $A'
  check "$name: rmmod $mod" rmmod $mod
  no_leaks
  sim_unload > /dev/null 2>&1
}
layout ubuntu modprobe -d "$HL/ubuntu" nvidia_peermem
layout ubuntu-upgraded modprobe -d "$HL/ubuntu-upgraded" nvidia_peermem
if [ -f "$HL/nvidia-kernel/src/peermem_rs.ko" ]; then
  layout nvidia-kernel insmod "$HL/nvidia-kernel/src/peermem_rs.ko"
else
  bad "nvidia-kernel: hosts.sh staged no module"
fi
finish
