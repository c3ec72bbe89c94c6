#!/bin/bash
# tests/bench/bench-selftest.sh -- the bench's own scripts on inputs whose
# answer is known: phases.sh on recorded runs, and the debug kernel's cache
# key.  Prints "ok - ..." or "FAIL - ..." per check, exits 1 on a failure.
# Run by `make check` and by `make test` (beside the contact check).
set -uo pipefail
BENCH=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rc=0
now=$(date +%s); t0=$((now - 1467)); export PHASES_NOW=$now
# phase LABEL START END CPU: seconds from the run's start
phase() { printf '%s\t%s\t%s\t0\t%s\n' "$1" $((t0 + $2)) $((t0 + $3)) "$4"; }

# A warm run: the debug kernel came from the cache in the same second as
# simctl's build ended, so both end where the lane's module build starts.
# A fresh run builds that kernel (800 s) and the chroot (241 s) first.
{ phase prereq 0 1 0; phase chroot 1 1 0; phase simctl 1 9 12
  phase "kernel 7.3.4-peermemdbg" 9 9 0; phase "cargo tests" 9 107 96
  phase "build 7.3.4-peermemdbg" 9 144 126; phase "vm 7.3.4-peermemdbg" 144 1467 959; } > "$tmp/warm.tsv"
printf 'chroot\tcached\t241\nkernel 7.3.4-peermemdbg\tcached\t800\n' > "$tmp/fresh.tsv"
out=$(bash "$BENCH/phases.sh" "$tmp/warm.tsv" "$tmp/fresh.tsv" "$t0" 1200)
if grep -q 'projected at 41\.8 min' <<< "$out" && grep -q -- '-> kernel 7.3.4-peermemdbg (0 s) -> build' <<< "$out"; then
  echo "ok   - phases.sh: a cached kernel on the critical path counts at its build time (24.4 + 17.4 min)"
else
  echo "FAIL - phases.sh: the fresh projection of a warm run left out the cached kernel: $(grep -E 'critical path:|projected' <<< "$out" | paste -sd' ')"; rc=1
fi
# The same run when fresh: nothing came from the cache.
printf 'chroot\tbuilt\t241\nkernel 7.3.4-peermemdbg\tbuilt\t800\n' > "$tmp/fresh.tsv"
out=$(bash "$BENCH/phases.sh" "$tmp/warm.tsv" "$tmp/fresh.tsv" "$t0" 3600)
if grep -q 'fresh run (nothing on the critical path came from the cache): 24\.4 min' <<< "$out" &&
   grep -q '^CPU: 60\.0 min .* 30\.0 min of wall at the least' <<< "$out" && ! grep -q WARNING <<< "$out"; then
  echo "ok   - phases.sh: a fresh run is its own wall time, with the CPU floor"
else
  echo "FAIL - phases.sh on a fresh run: $(grep -E 'CPU:|fresh|WARNING' <<< "$out" | paste -sd' ')"; rc=1
fi
# Over the budget: the warning.
out=$(BENCH_BUDGET_MIN=20 bash "$BENCH/phases.sh" "$tmp/warm.tsv" "$tmp/fresh.tsv" "$t0")
if grep -q '^WARNING: 24\.4 min is over the 20-minute budget' <<< "$out"; then
  echo "ok   - phases.sh: warns over the budget"
else
  echo "FAIL - phases.sh: no warning for 24.4 min over a 20-minute budget"; rc=1
fi
# A warm run of today's schedule (a624401): the background lane restores
# the debug kernel (a 1017 s build) and boots it while the foreground
# builds the rest and boots the Debian kernels.  The two run side by side
# in a fresh run: the lane's chain (chroot 241 s, kernel 1017 s, its VMs:
# 42.5 min) is the projection, not the sum of every cached build (49.1).
t0=$((now - 1395))
lphase() { phase "$@" | sed 's/$/\tlane/'; }
{ phase prereq 0 1 0; phase chroot 1 1 0; phase simctl 1 9 12; lphase "kernel 7.3.4-peermemdbg" 9 9 0
  phase "userspace build" 9 52 43; phase "kernel 7.2.12+deb13-amd64" 52 52 0; phase "build 7.2.12+deb13-amd64" 52 111 57
  lphase "build 7.3.4-peermemdbg" 9 140 126; phase "vm 7.2.12+deb13-amd64" 111 400 200
  lphase "vm 7.3.4-peermemdbg" 140 927 800; lphase "selfcheck 7.3.4-peermemdbg" 977 1295 330
  phase packaging 400 1395 900; } > "$tmp/lane.tsv"
printf 'chroot\tcached\t241\nkernel 7.3.4-peermemdbg\tcached\t1017\nkernel 7.2.12+deb13-amd64\tcached\t295\n' > "$tmp/fresh.tsv"
out=$(bash "$BENCH/phases.sh" "$tmp/lane.tsv" "$tmp/fresh.tsv" "$t0")
if grep -q 'projected at 42\.5 min (the foreground 32\.2, the background lane 42\.5)' <<< "$out" && ! grep -q WARNING <<< "$out" &&
   ! grep -q 'critical path: .*kernel 7.3.4-peermemdbg' <<< "$out"; then
  echo "ok   - phases.sh: the foreground and the background lane are projected side by side (42.5 min, not 49.1)"
else
  echo "FAIL - phases.sh: a warm run with a background lane: $(grep -E 'critical path:|projected|WARNING' <<< "$out" | paste -sd' ')"; rc=1
fi

# The debug kernel's cache key follows the options, not the comments: a
# comment edited in debug-kernel.config must not cost a kernel build.
key() ( . "$BENCH/lib.sh"; debug_kernel_key "$1" 2 )
cfg=$BENCH/debug-kernel.config
k0=$(key "$cfg")
{ echo "# a comment, reworded"; cat "$cfg"; echo; } > "$tmp/comment.config"
sed 's/^CONFIG_KASAN_INLINE=y$/CONFIG_KASAN_OUTLINE=y/' "$cfg" > "$tmp/option.config"
sed 's/^# CONFIG_DEBUG_INFO_BTF is not set$/CONFIG_DEBUG_INFO_BTF=y/' "$cfg" > "$tmp/unset.config"
if [ "$(key "$tmp/comment.config")" = "$k0" ] && [ "$(key "$tmp/option.config")" != "$k0" ] &&
   [ "$(key "$tmp/unset.config")" != "$k0" ] && ! cmp -s "$cfg" "$tmp/option.config" && ! cmp -s "$cfg" "$tmp/unset.config"; then
  echo "ok   - the debug kernel's cache key: a comment keeps it, a set or an unset option changes it"
else
  echo "FAIL - the debug kernel's cache key: comment $(key "$tmp/comment.config"), option $(key "$tmp/option.config"), unset $(key "$tmp/unset.config"), against $k0"; rc=1
fi
exit $rc
