# tests/bench/lib.sh -- shared settings and helpers of the bench scripts.
# Sourced (bash), never run.  Everything expensive lives under $CACHE, keyed
# by what produced it, so a warm machine rebuilds nothing.
set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$BENCH/../.." && pwd)
. "$BENCH/versions.env"

: "${CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/peermem-rs}"
# The chroot is the toolchain and, read-only over virtio-9p, the VM's root.
# Keyed by the pins (bump CHROOT_REV in versions.env when chroot.sh changes what it installs):
# the lines of versions.env above its "not in the chroot key" marker line
# (the whole file when it has none).
CHROOT_KEY=$(sed '/^# --- not in the chroot key ---$/,$d' "$BENCH/versions.env" | sha256sum | cut -c1-12)
ROOT=$CACHE/chroot-$SUITE-$CHROOT_KEY
# Where a bench run puts what it builds for the VM (inside the chroot).
# Path as seen inside the chroot and the VM; STAGE=/peermem-x gives a run of
# its own (builds, harness, binaries), so two runs can share the chroot.
: "${STAGE:=/peermem}"
# Results of the last run (console logs, summaries): on the host only.
: "${RESULTS:=$TOP/build/results-$(basename "$STAGE")}"

# The Debian mirror, taken from this host's apt configuration.
debian_mirror() {
  local m
  m=$(grep -rhE '^[[:space:]]*(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
      grep -oE 'https?://[^ ]+/debian/?' | grep -v -- '-security' | head -n1)
  echo "${MIRROR:-${m%/}}"
}

log()  { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die()  { printf 'bench: %s\n' "$*" >&2; exit 1; }

# The Debian kernels' package name stem, e.g. 7.2.12+deb13-amd64 -> 7.2
kseries() { echo "$1" | cut -d. -f1,2; }
is_debug_kernel() { [ "$1" = "$DEBUG_KERNEL" ]; }
debian_pkgver() { local v="DEBIAN_KERNEL_PKGVER_$(kseries "$1" | tr . _)"; echo "${!v}"; }

# Running a command in the chroot: each call gets a private mount namespace
# with /proc and /dev mounted, so concurrent runs never unmount each other's
# and nothing stays mounted on the host.
in_root() {
  unshare --mount --propagation private -- sh -c \
    'r=$1; shift; mount -t proc proc "$r/proc" && mount --rbind /dev "$r/dev" && exec chroot "$r" "$@"' \
    sh "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
}

# Step stamps: a step whose stamp exists with the same key is done.
stamp_file() { echo "$ROOT/.bench-stamps/$1"; }
stamp_ok()  { [ -f "$(stamp_file "$1")" ]; }
stamp_set() { mkdir -p "$ROOT/.bench-stamps"; date -u +%FT%TZ > "$(stamp_file "$1")"; }

# One preparation step at a time: a bench run that reaches a step another
# run is doing (the chroot, a kernel) waits for it and then finds it done,
# instead of failing on a half-built tree.  The lock is held on fd 9 until
# the step's script exits.
bench_lock() { # bench_lock NAME
  mkdir -p "$CACHE"
  exec 9> "$CACHE/.lock-$1"
  if ! flock -n 9; then
    log "another bench run is preparing $1: waiting for it"
    flock 9
  fi
}

# cpu_ticks VAR -- VAR := the CPU time (clock ticks, user + system) of this
# shell and of every process it has waited for (/proc/PID/stat's utime,
# stime, cutime, cstime): a step's difference is what it and its children
# (QEMU's threads, make's compilers) used.  (Into a variable: a command
# substitution would read its own subshell's.)
cpu_ticks() {
  local var=$1 s
  read -r s < "/proc/$BASHPID/stat"
  s=${s##*) }
  # shellcheck disable=SC2086 # the fields, split on purpose
  set -- $s
  printf -v "$var" %d $(( ${12} + ${13} + ${14} + ${15} ))
}
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
# Timing of a step, for the summaries: its wall and CPU time.  With
# BENCH_PHASES set (run.sh sets it for its own steps), each step also
# appends "LABEL START END RC CPU" (epoch seconds, CPU seconds,
# tab-separated) there: the per-phase table and the critical path at the
# end of `make test` (tests/bench/phases.sh).
# make test's background lane (run.sh: BENCH_LANE_PID) is this shell's
# child: reaped while a step runs, its whole CPU would land in that step.
# The lane writes its own total in BENCH_LANE_CPU as it ends, and a step
# that saw it reaped takes that out again (kill -0 fails only once the lane
# is reaped, so a check after the step's reading tells whether the reading
# holds it: if reaped, the reading is taken again and the lane taken out).
timed() { # timed LABEL cmd...  (BENCH_IN_LANE set: a step of run.sh's background lane)
  local t0 c0 c1 cpu rc=0 label=$1 lane=; shift
  [ -n "${BENCH_LANE_PID:-}" ] && kill -0 "$BENCH_LANE_PID" 2>/dev/null && lane=1
  t0=$(date +%s.%N); cpu_ticks c0
  "$@" || rc=$?
  cpu_ticks c1
  if [ -n "$lane" ] && ! kill -0 "$BENCH_LANE_PID" 2>/dev/null; then
    cpu_ticks c1; c1=$(( c1 - $(cat "$BENCH_LANE_CPU" 2>/dev/null || echo 0) ))
  fi
  cpu=$(( (c1 - c0) / CLK_TCK ))
  printf 'TIME %-40s %7.1f s rc=%d cpu=%ds\n' "$label" "$(echo "$(date +%s.%N) - $t0" | bc)" $rc $cpu >&2
  [ -z "${BENCH_PHASES:-}" ] || printf '%s\t%.1f\t%.1f\t%d\t%d\t%s\n' "$label" "$t0" "$(date +%s.%N)" $rc $cpu \
    "${BENCH_IN_LANE:+lane}" >> "$BENCH_PHASES"
  return $rc
}

# The debug kernel's cache key (kernel-debug.sh): the options CONFIG (its
# debug-kernel.config) sets and unsets, not its comments, with the source,
# the toolchain, the release and REV (the script's own revision).
debug_kernel_key() { # debug_kernel_key CONFIG REV
  { grep -E '^(CONFIG_[A-Za-z0-9_]+=|# CONFIG_[A-Za-z0-9_]+ is not set$)' "$1"
    echo "$DEBUG_KERNEL_SRCVER $RUSTC_PKGVER $LLVM_PKGVER $DEBUG_KERNEL $2"; } | sha256sum | cut -c1-12
}

# What a cached preparation step cost when it was built: the step records
# its build time under $CACHE/fresh-times/ (fresh_record), and writes into
# $BENCH_FRESH (run.sh's, when set) whether this run built it or took it
# from the cache, with that cost: the per-phase table projects a fresh run
# from a warm one with it.
fresh_record() { # fresh_record STEP-KEY SECONDS
  mkdir -p "$CACHE/fresh-times"; echo "$2" > "$CACHE/fresh-times/$1"
}
fresh_note() { # fresh_note PHASE-LABEL STEP-KEY built|cached
  [ -n "${BENCH_FRESH:-}" ] || return 0
  printf '%s\t%s\t%s\n' "$1" "$3" "$(cat "$CACHE/fresh-times/$2" 2>/dev/null || echo '?')" >> "$BENCH_FRESH"
}
