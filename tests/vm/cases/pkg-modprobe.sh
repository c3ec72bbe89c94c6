#!/bin/bash
# pkg-modprobe: the module as DKMS installed it into the chroot (the VM's
# root) before boot (tests/bench/pkg.sh install): `modprobe nvidia_peermem`
# finds the DKMS build in /lib/modules/<kernel>/updates/dkms (not the
# decoy nvidia-peermem.ko pkg.sh leaves in the kernel's own tree), pulls
# ib_uverbs in by its soft dependency, and loads next to the simulators under
# the identity NCCL/UCX/NVSHMEM detect: /sys/module/nvidia_peermem/version,
# client nv_mem.  Skips when the run installed nothing (pkg.sh not run).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
K=$(uname -r)
marker=$PEERMEM/pkg/$K.installed
[ -f "$marker" ] || skip "the run did not install the DKMS module for $K (tests/bench/pkg.sh install)"
version=$(cat "$marker")

check "a decoy nvidia-peermem.ko is in the kernel's own tree" \
  bash -c "ls /lib/modules/$K/kernel/drivers/video/nvidia-peermem.ko* > /dev/null"
f=$(modinfo -n nvidia_peermem 2>&1)
case $f in
  /lib/modules/"$K"/updates/dkms/nvidia_peermem.ko|/lib/modules/"$K"/updates/dkms/nvidia_peermem.ko.[gxz]*) ok "modinfo -n nvidia_peermem is the DKMS build: $f";;
  *) bad "modinfo -n nvidia_peermem is not the DKMS build: $f";;
esac
check "... its version is $version" test "$(modinfo -F version nvidia_peermem)" = "$version"
check "... modinfo names its binding: $(modinfo -F binding nvidia_peermem)" \
  test "$(modinfo -F binding nvidia_peermem)" = "weak: no provider Module.symvers found"
pm_down > /dev/null 2>&1
check "simulated GPU + core" sim_load || finish
log_mark modprobe
check "modprobe nvidia_peermem" modprobe nvidia_peermem || { log_since modprobe | tail -5; finish; }
check "... ib_uverbs loaded first (softdep)" test -d /sys/module/ib_uverbs
check "... /sys/module/nvidia_peermem/version is $version" \
  test "$(cat /sys/module/nvidia_peermem/version 2>/dev/null)" = "$version"
check "... registered with the core as nv_mem" sim_run 'core stats'
has '^client name=nv_mem ' || bad "no client nv_mem in the core's stats"
# shellcheck disable=SC2016 # simctl's own variables
check "... serves registrations" sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; core dereg $H'
check "rmmod nvidia_peermem" rmmod nvidia_peermem
check "... gone" test ! -e /sys/module/nvidia_peermem
no_leaks
check "unload the simulators" sim_unload
finish
