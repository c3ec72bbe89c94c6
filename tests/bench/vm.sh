#!/bin/bash
# tests/bench/vm.sh KVER CASES -- boot one kernel of the matrix in QEMU and
# run the in-VM cases CASES (comma list of tests/vm/cases/<name>.sh).
# The root filesystem is the chroot, read-only over virtio-9p; QEMU runs
# under TCG (-accel tcg,thread=multi -cpu max, q35; thread=single for the
# Debian kernels in make test's two lanes): /dev/kvm here is nested PVM, on
# which unmodified guests fail.  KVM is used only where a probe boot
# succeeds (BENCH_ACCEL=kvm forces it).  Serial console, power-off at the
# end, hard timeout (VM_TIMEOUT).  Prints the console and, last, one line
#   VMSUMMARY KVER passed=N failed=N skipped=N failed_cases=a,b
# A VM that dies mid-case (panic, oops, timeout) fails that case by name.
# CASES=shell gives an interactive VM instead.
. "$(dirname "$0")/lib.sh"
KVER=$1; CASES=${2:-}
# The whole boot's hard limit (each case also has its own, CASE_TIMEOUT):
# the KASAN/lockdep kernel runs the suite several times slower under TCG.
if is_debug_kernel "$KVER"; then : "${VM_TIMEOUT:=5400}"; fi
: "${VM_TIMEOUT:=1500}" "${VM_MEM:=3G}" "${VM_CPUS:=2}"
mkdir -p "$RESULTS"

# The VM sees the test harness from the stage.
mkdir -p "$ROOT$STAGE/vm"
rsync -a --delete "$TOP/tests/vm/" "$ROOT$STAGE/vm/"

APPEND="console=ttyS0 panic=-1 oops=panic loglevel=4 vmstage=$STAGE"
# The cases read the kernel log since their marks (tests/vm/lib.sh
# log_since): a ring buffer that wraps mid-case loses the mark.  The debug
# kernel's default is 128 KiB (CONFIG_LOG_BUF_SHIFT=17), less than one
# campaign's KASAN reports (the plant-use-after-callback control: about
# 20 reports of ~4 KiB).  (make stress asks for 64M after this.)
APPEND="$APPEND log_buf_len=16M"
if is_debug_kernel "$KVER"; then
  BOOT=(-kernel "$ROOT/build/kernel-$KVER/arch/x86/boot/bzImage")
  APPEND="$APPEND root=rootfs rootfstype=9p rootflags=trans=virtio,version=9p2000.L,msize=512000,cache=loose ro init=$STAGE/vm/entry.sh"
  # Under KASAN + lockdep in TCG, a 120 s hung-task limit gives false alarms
  # on a busy host; 600 s still catches real deadlocks within the case timeout.
  APPEND="$APPEND hung_task_timeout_secs=600"
  # 5-level paging (QEMU's -cpu max has LA57) lets an interrupt during early
  # boot hit KASAN shadow that is not set up yet ("wild-memory-access in
  # do_raw_spin_lock" at ~1 s), which also switches lockdep off for the
  # boot; 4-level paging avoids it.  Every KASAN report is printed
  # (multi-shot), so one report cannot hide the next case's.
  APPEND="$APPEND no5lvl kasan_multi_shot"
else
  BOOT=(-kernel "$ROOT/boot-bench/$KVER/vmlinuz" -initrd "$ROOT/boot-bench/$KVER/initrd.img")
fi
[ -f "${BOOT[1]}" ] || die "no kernel image for $KVER (${BOOT[1]}): run the kernel step"

# VM_TCG_THREAD=single: one host thread runs every vCPU in turn (a VM then
# takes at most one core).  Unset, make test's two lanes (BENCH_TWO_LANES,
# see run.sh) run the Debian kernels single-threaded, the debug kernel
# multi-threaded.
thread=${VM_TCG_THREAD:-}
if [ -z "$thread" ]; then
  thread=multi
  [ -n "${BENCH_TWO_LANES:-}" ] && ! is_debug_kernel "$KVER" && thread=single
fi
accel="-accel tcg,thread=$thread"
if [ "${BENCH_ACCEL:-}" = kvm ]; then accel="-accel kvm"; fi

# VM_IOMMU=1: QEMU's emulated Intel IOMMU (VT-d) in front of every PCI
# device, switched on in the guest in strict, translating mode: the HCA's
# DMA addresses are then IOVAs (the simulated NVIDIA driver maps the BAR
# with dma_map_resource, as the real one does, and the HCA resolves them
# through its IOMMU domain; an address not mapped faults).
iommu=()
if [ "${VM_IOMMU:-}" = 1 ]; then
  # shellcheck disable=SC2054 # one QEMU option with its properties
  iommu=(-device intel-iommu,intremap=off)
  APPEND="$APPEND intel_iommu=on iommu.passthrough=0 iommu.strict=1 vmiommu=1"
fi
qemu=(qemu-system-x86_64 $accel -cpu max -machine q35 -m "$VM_MEM" -smp "$VM_CPUS"
      -nographic -no-reboot -nic none "${iommu[@]}" "${BOOT[@]}"
      -virtfs "local,path=$ROOT,mount_tag=rootfs,security_model=none,readonly=on,multidevs=remap")
if [ "$CASES" = shell ]; then
  exec "${qemu[@]}" -append "$APPEND vmshell=1 ${VM_APPEND:-}"
fi
[ -n "$CASES" ] || die "usage: vm.sh KVER case[,case...]|shell"

LOG=$RESULTS/console-$KVER.log
PIDFILE=$RESULTS/qemu-$KVER.pid
# A guest that has not reached the bench's PID 1 (VMBOOT) within BOOT_LIMIT
# seconds is stuck in early boot (seen once under TCG on a loaded host:
# silent after the real-mode setup); it is killed and booted once more.  So
# is one that died before PID 1 (seen under multi-threaded TCG: an "Oops:
# int3" in an initcall while the kernel patched its own text, before any
# module of ours was loaded).
: "${BOOT_LIMIT:=600}"
boot() { # boot -- one boot; 3 if stuck before PID 1, 4 if it died there
  local pipe waited=0
  rm -f "$PIDFILE"
  timeout --foreground -k 10 "$VM_TIMEOUT" "${qemu[@]}" -pidfile "$PIDFILE" \
    -append "$APPEND vmcases=$CASES ${VM_APPEND:-}" < /dev/null 2>&1 |
    stdbuf -o0 tr -d '\r' | tee -a "$LOG" &
  pipe=$!
  while kill -0 $pipe 2>/dev/null; do
    grep -q '^VMBOOT ' "$LOG" && break
    if [ $waited -ge "$BOOT_LIMIT" ]; then
      echo "VM stuck before PID 1 after ${waited}s: killing it"
      kill "$(cat "$PIDFILE" 2>/dev/null)" 2>/dev/null || true
      wait $pipe || true
      return 3
    fi
    sleep 5; waited=$((waited + 5))
  done
  wait $pipe || true
  grep -q '^VMBOOT ' "$LOG" || return 4
}
t0=$(date +%s)
: > "$LOG"
if ! boot; then echo "VMRETRY: booting $KVER once more"; : > "$LOG"; boot || true; fi
wall=$(( $(date +%s) - t0 ))
# The console's last line may lack its newline (QEMU stops mid-line): the
# verdict lines below start lines of their own (run.sh greps ^VMSUMMARY).
echo

# Verdicts.
pass=0; fail=0; skipped=0; failed=
# VM_CONTROLS: cases that are negative controls (they must fail; run.sh
# judges them): not counted here.
while read -r _ name verdict _; do
  case ",${VM_CONTROLS:-}," in *,"$name",*) continue;; esac
  case $verdict in PASS) pass=$((pass+1));; SKIP) skipped=$((skipped+1));; *) fail=$((fail+1)); failed="$failed,$name";; esac
done < <(grep -oE 'VMCASE-END [^ ]+ [A-Z]+ ' "$LOG")
# A case that began and never ended died with the VM.
last_begin=$(grep -oE 'VMCASE-BEGIN [^ ]+$' "$LOG" | tail -1 | awk '{print $2}' || true)
if [ -n "$last_begin" ] && ! grep -qF "VMCASE-END $last_begin " "$LOG"; then
  fail=$((fail+1)); failed="$failed,$last_begin"
  echo "VM died while '$last_begin' ran (panic, oops or timeout after ${wall}s); the kernel said:"
  grep -E 'BUG|Oops|panic|KASAN|RIP:|Call Trace' "$LOG" | head -20 || true
fi
if ! grep -q 'VMBOOT ' "$LOG"; then
  fail=$((fail+1)); failed="$failed,boot"; echo "VM never reached the bench's PID 1 (see $LOG)"
elif ! grep -q 'VMDONE ' "$LOG"; then
  # Cases listed but never begun count as failed too.
  for c in ${CASES//,/ }; do grep -qF "VMCASE-BEGIN $c" "$LOG" || { fail=$((fail+1)); failed="$failed,$c"; }; done
fi
echo "VMSUMMARY $KVER passed=$pass failed=$fail skipped=$skipped wall=${wall}s failed_cases=${failed#,}"
[ $fail = 0 ]
