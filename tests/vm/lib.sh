# /peermem/vm/lib.sh -- helpers for PID 1 and for the in-VM cases.
#
# A case is /peermem/vm/cases/<name>.sh, run with bash under a timeout.  It
# exits 0 to pass, 77 to skip (not applicable on this kernel), anything else
# to fail.  It sources this file for: PEERMEM (the staged tree), MODS (the .ko
# files built for the running kernel), BIN (userspace binaries), ok/bad/skip
# reporting, kernel-log checks and soft-RoCE set-up.
PEERMEM=${vmstage:-/peermem}   # the staged tree (vmstage= on the kernel command line)
MODS=$PEERMEM/mods/$(uname -r)
BIN=$PEERMEM/bin
CASES=$PEERMEM/vm/cases
# One case's limit: the KASAN/lockdep kernel runs several times slower.
if [ -e /proc/lockdep ]; then : "${CASE_TIMEOUT:=1200}"; fi
: "${CASE_TIMEOUT:=600}"

uptime_s() { local u; read -r u _ < /proc/uptime; echo "$u"; }
debug_kernel() { [ -e /proc/lockdep ] && echo yes || echo no; }
# For cases of the userspace tool that the Debian kernels cover and that gain
# nothing from KASAN/lockdep but minutes under TCG: skip on the debug kernel.
skip_on_debug_kernel() {
  [ "$(debug_kernel)" = yes ] && skip "$* (covered on the Debian kernels; slow under KASAN)"
  return 0
}

# Reporting inside a case: `ok msg`, `bad msg` (marks the case failed; use
# `exit $rc` or `finish` at the end), `skip msg` (ends the case as skipped).
rc=0
ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; rc=1; }
skip() { echo "skip - $*"; exit 77; }
finish() { exit $rc; }
# check "description" cmd... : ok if the command succeeds, else bad; returns
# the command's status, so `check ... || finish` stops a case early.
check() { local d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; return 1; fi; }
# wait_line FILE ERE PID [SECONDS] : wait for a line of FILE matching ERE,
# written by background process PID; fails when PID exits without it or
# after SECONDS (default 60: a stalled VM is slow, not wrong).
wait_line() {
  local f=$1 re=$2 pid=$3 end=$((SECONDS + ${4:-60}))
  while [ $SECONDS -lt $end ]; do
    grep -qE "$re" "$f" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -qE "$re" "$f" 2>/dev/null
}
# cm_listening SRV_PID: wait (up to 2 min) until an RDMA CM id listens, or
# the server SRV_PID is gone; 0 if one listens.  A perftest client that
# connects before its server's id listens is rejected and then crashes in
# librdmacm (a loaded, slow VM took over 10 s to get there).
cm_listening() {
  local i
  for i in $(seq 240); do
    rdma resource show cm_id 2> /dev/null | grep -q 'state LISTEN' && return 0
    kill -0 "$1" 2> /dev/null || return 1
    sleep 0.5
  done
  return 1
}
# client_of SRV_PID cmd... : run a client of a server started in the
# background; while the client fails and the server still waits, try again
# (up to 10 times, 1 s apart): a stalled VM may not be listening yet.
client_of() {
  local srv=$1 i; shift
  for i in $(seq 10); do
    "$@" && return 0
    kill -0 "$srv" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}
# Expect a command to fail with an errno message (e.g. insmod's).
fails_with() { # fails_with "description" "regex of the error" cmd...
  local d=$1 re=$2 out; shift 2
  if out=$("$@" 2>&1); then bad "$d (succeeded: $out)"; return; fi
  if echo "$out" | grep -qE "$re"; then ok "$d"; else bad "$d (wrong error: $out)"; fi
}

# Kernel log since a mark.  Cases may name WARNINGs they provoke on purpose
# by appending an extended regex to $EXPECT_WARN_FILE (one per line); those
# WARNING lines are then allowed, nothing else is.
EXPECT_WARN_FILE=/tmp/expect-warn
log_mark() { echo "VMMARK $1" > /dev/kmsg; }
# A mark the ring buffer no longer holds (it wrapped: vm.sh's log_buf_len
# makes that unlikely) would hide every report after it: log_since then
# prints a report of its own instead, which fails the case.
log_since() {
  # One awk over dmesg (a process costs about half a second on the debug
  # kernel under TCG, and every case calls this): the lines after the first
  # that ends with the mark.
  dmesg | awk -v m="VMMARK $1" '
    found { print; next }
    length($0) >= length(m) && substr($0, length($0) - length(m) + 1) == m { found = 1 }
    END { if (!found) print "BUG: the kernel log no longer holds \x27" m "\x27 (its ring buffer wrapped): what was logged since cannot be checked" }'
}
BAD_LOG_RE='BUG: |WARNING:|UBSAN:|Oops|general protection fault|possible recursive locking|possible circular locking|inconsistent lock state|suspicious RCU usage|blocked for more than|soft lockup|hard LOCKUP|kmemleak: .*new suspected memory leak|kernel BUG at|list_add corruption|list_del corruption|refcount_t:'
log_reports() { # log_reports MARK: print the kernel reports logged since MARK
  local reports
  reports=$(log_since "$1" | grep -E "$BAD_LOG_RE")
  if [ -s "$EXPECT_WARN_FILE" ] && [ -n "$reports" ]; then
    reports=$(echo "$reports" | grep -vE "^(\[[ 0-9.]+\] )?WARNING: .*($(paste -sd'|' "$EXPECT_WARN_FILE"))")
  fi
  [ -n "$reports" ] && echo "$reports"
  return 0
}

# module_loaded NAME -- NAME is in /proc/modules (read by a builtin loop:
# see log_since).
module_loaded() {
  local n _
  while read -r n _; do [ "$n" = "$1" ] && return 0; done < /proc/modules
  return 1
}

# rmmod_settled MODULE -- rmmod once the module's last references are gone:
# peermem_rs gives a free callback's reference back from its own work
# queue (so that no code of the module runs after its last reference), a
# moment after the callback; "in use" is retried for up to 3 s, any other
# failure is final.
rmmod_settled() {
  local i out
  for i in $(seq 30); do
    out=$(rmmod "$1" 2>&1) && return 0
    [[ $out == *'in use'* ]] || { echo "$out" >&2; return 1; }
    sleep 0.1
  done
  echo "$out" >&2; return 1
}

run_case() { # run_case NAME -- run one case, print its verdict lines
  local name=$1 t0 r reports f=$CASES/$1.sh
  echo "VMCASE-BEGIN $name"
  t0=$EPOCHREALTIME
  rm -f "$EXPECT_WARN_FILE"
  log_mark "$name"
  if [ "$name" = kmemleak ]; then
    kmemleak_case; r=$?
  elif [ "$name" = boot-log ]; then
    boot_log_case; r=$?
  elif [ -f "$f" ]; then
    timeout -k 10 "$CASE_TIMEOUT" bash "$f"; r=$?
    [ $r = 124 ] && echo "FAIL - case timed out after ${CASE_TIMEOUT}s"
  else
    echo "FAIL - no such case: $f"; r=1
  fi
  reports=$(log_reports "$name")
  if [ -n "$reports" ]; then
    # The first report on the FAIL line itself (summaries keep only those).
    echo "FAIL - the kernel log shows reports while '$name' ran: $(head -n 1 <<< "$reports")"
    log_since "$name" | grep -E -A25 "$BAD_LOG_RE" | head -n 80
    r=1
  fi
  local verdict=FAIL
  case $r in 0) verdict=PASS;; 77) verdict=SKIP;; esac
  # (Bash's clock, not date and bc: see log_since.)
  local us=$(( ${EPOCHREALTIME/./} - ${t0/./} ))
  echo "VMCASE-END $name $verdict $((us / 1000000)).$((us % 1000000 / 100000))"
}

# The kernel log of the boot, up to the first case: no report allowed.
boot_log_case() {
  local reports
  reports=$(dmesg | sed '/VMMARK boot-log$/,$d' | grep -E "$BAD_LOG_RE")
  if [ -n "$reports" ]; then
    echo "FAIL - the boot log shows reports:"; dmesg | grep -E -A20 "$BAD_LOG_RE" | head -n 40; return 1
  fi
  echo "ok   - boot log clean ($(dmesg | wc -l) lines)"
  return 0
}

# The debug kernel's leak check, run once after all cases: two scans (an
# object must be seen unreferenced twice), then any report fails.
kmemleak_case() {
  local k=/sys/kernel/debug/kmemleak
  [ -w $k ] || { echo "FAIL - $k missing on the debug kernel"; return 1; }
  echo scan > $k; sleep 6; echo scan > $k
  # (debugfs files report size 0: read the report, do not test its size)
  local report
  report=$(< $k)
  if [ -n "$report" ]; then
    echo "FAIL - kmemleak reports:"; head -n 60 <<< "$report"; return 1
  fi
  echo "ok   - kmemleak: no unreferenced objects"
  return 0
}

# Soft-RoCE: rxe on a dummy netdev with an address that exists only inside
# the VM (rdma_cm cannot route over rxe on lo).  Sets RXE_DEV and RXE_GID.
rxe_up() { # rxe_up [name] [netdev] [ipv4/prefix]
  local dev=${1:-rxe0} nd=${2:-dummy0} ip=${3:-192.0.2.1/24} p g gid typ i
  # The bench's soft RDMA device (tests/rxe-peer) registers the link type
  # rxe in rdma_rxe's place when it is loaded.
  if ! module_loaded rxe_peer; then modprobe rdma_rxe || return 1; fi
  modprobe ib_uverbs && modprobe rdma_ucm || return 1
  modprobe dummy || return 1
  ip link show "$nd" >/dev/null 2>&1 || ip link add "$nd" type dummy || return 1
  ip addr add "$ip" dev "$nd" 2>/dev/null; ip link set "$nd" up || return 1
  rdma link add "$dev" type rxe netdev "$nd" || return 1
  p=/sys/class/infiniband/$dev/ports/1
  # Builtins only in this loop: forks are slow under TCG.
  for i in $(seq 200); do
    for g in 0 1 2 3 4 5 6 7; do
      read -r gid < $p/gids/$g 2>/dev/null || continue
      read -r typ < $p/gid_attrs/types/$g 2>/dev/null || continue
      case "$gid:$typ" in 0000:0000:0000:0000:0000:ffff:*:"RoCE v2")
        RXE_DEV=$dev; RXE_GID=$g; return 0;; esac
    done
    sleep 0.05
  done
  return 1
}
rxe_down() { rdma link delete "${1:-rxe0}"; }
