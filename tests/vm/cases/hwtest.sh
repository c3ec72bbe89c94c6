#!/bin/bash
# hwtest (issue 34): make hwtest's tests/hw/validate.sh run for real, not
# --dry-run, on the bench: the soft RDMA device (tests/rxe-peer) is its HCA,
# the libcuda stand-in in nvsim mode its CUDA (GPU memory the simulated
# NVIDIA driver owns), perftest built with CUDA its perftest
# (validate.sh --perftest), the staged peermem-probe its probe.  The
# nvidia_peermem that `modprobe nvidia_peermem` finds is put where DKMS puts
# it (updates/ of the kernel's module tree, an overlay over the read-only
# root) and depmod run, three times:
#   peermem-rs (the module built as nvidia_peermem): validate.sh passes:
#     identity, counters readable, peermem-probe check (its "peer memory
#     works" verdict asserted here), the GPU runs counted by the module, the
#     bandwidth table;
#   NVIDIA's nvidia-peermem (the control build the bench has): validate.sh
#     fails on the identity and on the counters (the data moves all the
#     same: NVIDIA's module serves the registrations);
#   none: validate.sh fails on the missing module, and the probe's check
#     does not say peer memory works.
# Small runs (64 KiB, 20 messages): under TCG the ratios mean nothing, so
# --min-ratio 0 (what is measured is that each run moved data, and whose
# registrations they were).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
skip_on_debug_kernel "make hwtest runs once, on the newest Debian kernel (tests/vm/suite.list)"
. "$CASES/perftest-common.inc"
perftest_prepare || finish
K=$(uname -r)
V=$PEERMEM/src/$K/tests/hw/validate.sh
[ -f "$V" ] || { bad "validate.sh is not staged ($V)"; finish; }
[ -x "$BIN/peermem-probe" ] || { bad "peermem-probe is not staged ($BIN)"; finish; }
[ -f "$MODS/nvidia_peermem.ko" ] || { bad "no $MODS/nvidia_peermem.ko (peermem-rs built as nvidia_peermem)"; finish; }
[ -f "$MODS/nvidia/nvidia-peermem.ko" ] || { bad "no NVIDIA's nvidia-peermem.ko for $K"; finish; }

# The kernel's module tree, writable: an overlay on tmpfs over the 9p root.
O=/tmp/hwtest-modules
mods_writable() {
  mkdir -p $O/upper $O/work && modprobe overlay &&
    mount -t overlay overlay -o "lowerdir=/lib/modules/$K,upperdir=$O/upper,workdir=$O/work" "/lib/modules/$K"
}
# The modules of the kernel's tree that are loaded: with the client, all
# that modprobe's index holds from here on (depmod -a reads the whole tree:
# about 100 s under TCG; and whatever nvidia_peermem another run installed
# into the chroot, DKMS's or pkg.sh's decoy, stays out of it).
loaded_files() {
  local m f
  while read -r m _; do
    f=$(modinfo -n "$m" 2> /dev/null) && [[ $f == /lib/modules/$K/* ]] && echo "$f"
  done < /proc/modules
  return 0
}
# install_client FILE|none -- FILE is the nvidia_peermem modprobe finds, as
# DKMS installs one (none: no nvidia_peermem at all); depmod.
install_client() {
  local files=()
  rm -rf "/lib/modules/$K/updates/hwtest"
  if [ "$1" != none ]; then
    mkdir -p "/lib/modules/$K/updates/hwtest" && cp "$1" "/lib/modules/$K/updates/hwtest/" || return 1
    files=("/lib/modules/$K/updates/hwtest/${1##*/}")
  fi
  depmod "$K" "${LOADED[@]}" "${files[@]}"
}
# hw_down -- whichever nvidia_peermem validate.sh loaded, then the simulators.
hw_down() {
  local r=0
  ! module_loaded nvidia_peermem || rmmod_settled nvidia_peermem || r=1
  sim_unload || r=1
  return $r
}
# validate WHAT -- validate.sh with the bench's perftest, stand-in and probe
# (the knobs perftest-cuda.sh uses: the stand-in's nvsim mode); its output
# in $OUT, its exit status in $VRC.
validate() {
  local t0 t1
  t0=$(uptime_s)
  OUT=$(PATH=$BIN:$PATH LD_LIBRARY_PATH=$L PEERMEM_CUDA_STANDIN_MEMORY=nvsim \
    timeout 400 bash "$V" --perftest "$PT" --sizes 65536 --iters 20 --wait 60 --min-ratio 0 2>&1)
  VRC=$?
  t1=$(uptime_s)
  echo "$OUT" | grep -E '^(validate: |(into|out_of)_GPU )' | sed 's/^/    /'
  ok "$1: validate.sh ran in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}') s, exit $VRC"
}
has_line() { grep -qE -- "$1" <<< "$OUT"; }
no_line() { ! has_line "$1"; }
# seen WHAT ERE -- a check that validate.sh printed a line matching ERE.
seen() { check "$1" has_line "$2"; }

check "rxe0 on the soft RDMA device" soft_rdma_up || finish
mapfile -t LOADED < <(loaded_files)
check "ib_uverbs among the loaded modules of the tree (${#LOADED[@]})" grep -q '/ib_uverbs\.ko' <<< "${LOADED[*]}" || finish
check "the kernel's module tree, writable (overlay)" mods_writable || finish
# Whatever way the case ends, the next case's modprobe sees the tree as it
# was (its index here holds only the loaded modules).
trap 'mountpoint -q "/lib/modules/$K" && umount "/lib/modules/$K"' EXIT
pm_down > /dev/null 2>&1; hw_down > /dev/null 2>&1

# 1. peermem-rs.
check "modprobe nvidia_peermem finds peermem-rs (updates/, depmod)" install_client "$MODS/nvidia_peermem.ko" || finish
check "simulated GPU + core" sim_load || finish
validate "peermem-rs"
check "peermem-rs: validate.sh exits 0 (got $VRC)" test "$VRC" = 0 || echo "$OUT" | tail -60
seen "peermem-rs: PASS identity (modprobe loads peermem-rs)" '^validate: PASS: modprobe nvidia_peermem loads peermem-rs '
seen "peermem-rs: PASS the loaded module is peermem-rs" '^validate: PASS: the loaded nvidia_peermem is peermem-rs .*client nv_mem'
seen "peermem-rs: PASS counters readable" '^validate: PASS: the module.s counters are readable'
seen "peermem-rs: PASS perftest has CUDA" '^validate: PASS: .*ib_write_bw has --use_cuda'
seen "peermem-rs: peermem-probe check: peer memory works on rxe0" '^peer memory +rxe0 +works'
seen "peermem-rs: ... its verdict: GPUDirect RDMA works via peer memory" '^peermem-probe check: GPUDirect RDMA works via peer memory'
seen "peermem-rs: PASS peermem-probe check" '^validate: PASS: peermem-probe check: GPUDirect RDMA works on rxe0, GPU 0'
seen "peermem-rs: PASS into GPU (ib_write_bw) counted by the module" \
  '^validate: PASS: ib_write_bw 65536 bytes, client host memory, server gpu memory: through peermem-rs \(1 registration\(s\), all released\)'
seen "peermem-rs: PASS out of GPU (ib_read_bw) counted by the module" \
  '^validate: PASS: ib_read_bw 65536 bytes, client host memory, server gpu memory: through peermem-rs \(1 registration\(s\), all released\)'
seen "peermem-rs: into GPU row PASS" '^into_GPU +ib_write_bw +65536 +[0-9.]+ +[0-9.]+ +[0-9.]+ +PASS$'
seen "peermem-rs: out of GPU row PASS" '^out_of_GPU +ib_read_bw +65536 +[0-9.]+ +[0-9.]+ +[0-9.]+ +PASS$'
seen "peermem-rs: summary, no failure" '^validate: 0 failure\(s\)'
no_leaks
check "peermem-rs: unloaded" hw_down

# 2. NVIDIA's nvidia-peermem, on the simulators as the 550 driver's
#    (nvpm-common.inc: page tables v1).
check "modprobe nvidia_peermem finds NVIDIA's" install_client "$MODS/nvidia/nvidia-peermem.ko" || finish
check "simulated GPU (550's page tables) + core" sim_load pt_version=0x00010002 || finish
validate "NVIDIA's"
check "NVIDIA's: validate.sh exits 1 (got $VRC)" test "$VRC" = 1 || echo "$OUT" | tail -60
seen "NVIDIA's: FAIL identity (the file is not peermem-rs)" \
  '^validate: FAIL: modprobe nvidia_peermem loads /lib/modules/.*/nvidia-peermem\.ko, which is not peermem-rs'
seen "NVIDIA's: FAIL the loaded module is NVIDIA's" "^validate: FAIL: the loaded nvidia_peermem is NVIDIA's"
seen "NVIDIA's: FAIL no counters" "^validate: FAIL: cannot read the module's counters"
seen "NVIDIA's: the GPU runs FAIL on the counters" '^into_GPU +ib_write_bw +65536 .*FAIL \(not through peermem-rs: counters\)$'
check "NVIDIA's: no PASS of identity or counters" \
  no_line '^validate: PASS: (modprobe nvidia_peermem loads|the loaded nvidia_peermem is|ib_.* through peermem-rs)'
no_leaks
check "NVIDIA's: unloaded" hw_down

# 3. No client.
check "no nvidia_peermem for modprobe" install_client none || finish
check "simulated GPU + core" sim_load || finish
validate "no client"
check "no client: validate.sh exits 1 (got $VRC)" test "$VRC" = 1 || echo "$OUT" | tail -60
seen "no client: FAIL no module" '^validate: FAIL: no nvidia_peermem module for [^ ]+: install peermem-rs-dkms'
seen "no client: FAIL not loaded" '^validate: FAIL: nvidia_peermem is not loaded'
seen "no client: FAIL peermem-probe check" '^validate: FAIL: peermem-probe check exited [0-9]+: GPUDirect RDMA does not work'
check "no client: the probe does not say peer memory works" \
  no_line '^peer memory +rxe0 +works|^peermem-probe check: GPUDirect RDMA works'
no_leaks
check "no client: unloaded" hw_down

check "the module tree as it was (overlay unmounted)" umount "/lib/modules/$K"
trap - EXIT
check "soft RDMA device down" soft_rdma_down
finish
