#!/bin/bash
# <stage>/vm/entry.sh -- PID 1 of a bench VM.  Runs the in-VM cases named
# by the kernel command line (vmcases=a,b,c; each is
# <stage>/vm/cases/<name>.sh), one after another, and reports each on the
# console as
#     VMCASE-BEGIN <name>
#     VMCASE-END <name> PASS|FAIL|SKIP <seconds>
# which the host (tests/bench/vm.sh) turns into the suite's counts.  A case
# also fails if the kernel log written while it ran shows a KASAN, UBSAN,
# lockdep, hung-task, soft-lockup, WARN, BUG or Oops report (see vm/lib.sh).
# With vmshell=1 it gives an interactive shell on the console instead.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys  || mount -t sysfs sys /sys
mountpoint -q /dev  || mount -t devtmpfs dev /dev
mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ln -sfn /proc/self/fd /dev/fd
ip link set lo up
. "${vmstage:-/peermem}/vm/lib.sh"

poweroff_now() {
  # The fifo before the power-off: once it starts, 9p is torn down and an
  # exec'd program fails (an error printed half-way, seen as the console's
  # unterminated last line).
  mkfifo /run/halt.fifo
  sync
  echo o > /proc/sysrq-trigger
  # Wait with a builtin: PID 1 exiting would panic the kernel.
  read -t 60 <> /run/halt.fifo
}

echo; echo "VMBOOT kernel $(uname -r) uptime $(uptime_s)s"
if [ "${vmshell:-0}" = 1 ]; then
  echo "bench VM shell: the root is read-only (the chroot); /tmp is writable; exit powers off."
  setsid -c bash -l < /dev/ttyS0 > /dev/ttyS0 2>&1
  poweroff_now
fi

# The boot itself must be clean: a report before the first case (KASAN,
# lockdep, WARN...) would also leave the debug facilities off for the cases.
run_case boot-log
for c in ${vmcases//,/ }; do
  run_case "$c"
done
[ "$(debug_kernel)" = yes ] && run_case kmemleak
echo "VMDONE uptime $(uptime_s)s"
poweroff_now
