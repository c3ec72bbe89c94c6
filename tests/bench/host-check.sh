#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# tests/bench/host-check.sh -- `make check`: the host-side tests alone, as any
# user, with the host's own Rust toolchain (cargo >= 1.85 on PATH or in
# ~/.cargo/bin): no root, no chroot, no VM.
#   cargo test of rust/logic (the module's pure logic), userspace (peermem-probe)
#   and tests/simctl; peermem-probe with the libcuda stand-in (tests/cuda-standin);
#   rustfmt --check of the module's sources; scripts/contact.sh (one maintainer
#   address everywhere); tests/bench/bench-selftest.sh (the phase table,
#   the debug kernel's cache key); tests/hw/selftest.sh.
# The last line is "N passed, N failed, N skipped"; exit 1 on any failure.
# CARGO_TARGET_DIR (default build/host-target) holds the builds.
set -uo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
PATH=$PATH:${CARGO_HOME:-$HOME/.cargo}/bin
: "${CARGO_TARGET_DIR:=$TOP/build/host-target}"
export CARGO_TARGET_DIR
passed=0 failed=0 skipped=0 failures=()
T0=$(date +%s)

die() { echo "check: $*" >&2; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
command -v cargo >/dev/null ||
  die "no cargo on PATH or in ~/.cargo/bin: install a Rust toolchain >= 1.85 (rustup, or Debian trixie's cargo), or run 'make test' as root, which brings its own"
ver=$(rustc --version 2>/dev/null | awk '{print $2}')
case $ver in
  1.[0-9].*|1.[0-7][0-9].*|1.8[0-4].*) die "rustc $ver is older than 1.85, which the crates need (Cargo.toml rust-version)";;
esac

for d in rust/logic userspace tests/simctl; do
  echo "== cargo test: $d"
  out=$(cd "$TOP/$d" && cargo test --locked --quiet 2>&1); rc=$?
  echo "$out" | tail -n 40
  counts=$(echo "$out" | sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p')
  # A build error or a crash prints no (failing) test result: count it.
  if [ $rc != 0 ] && ! awk '$2 > 0 {f = 1} END {exit !f}' <<< "$counts"; then
    counts=$(printf '%s\n0 1 0' "$counts")
  fi
  while read -r p f i; do
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + i))
    [ "$f" = 0 ] || failures+=("cargo test $d")
  done <<< "$counts"
done

# The libcuda stand-in of the bench (tests/cuda-standin, the VM case
# probe-cuda-standin): it builds, and cudarc's loader in peermem-probe takes
# it (every name it resolves exists) and lists its GPU.
echo "== tests/cuda-standin: peermem-probe loads the libcuda stand-in"
if ! command -v "${CC:-cc}" >/dev/null || [ ! -e /usr/include/linux/udmabuf.h ]; then
  echo "no C compiler or no linux/udmabuf.h (linux-libc-dev): skipped"; skipped=$((skipped + 1))
else
  # peermem-probe check exits non-zero on a host without RDMA device: its
  # CUDA lines are what counts here.
  out=$(bash "$TOP/tests/cuda-standin/build.sh" "$CARGO_TARGET_DIR/cuda-standin" 2>&1 &&
        LD_LIBRARY_PATH=$CARGO_TARGET_DIR/cuda-standin timeout 60 "$CARGO_TARGET_DIR/debug/peermem-probe" check 2>&1)
  if grep -q '^CUDA: driver API 12\.4$' <<< "$out" && grep -q '^GPU 0: peermem-rs bench GPU stand-in at ' <<< "$out"; then
    grep -E '^(CUDA|GPU 0):' <<< "$out"; passed=$((passed + 1))
  else
    echo "$out" | head -20; failed=$((failed + 1)); failures+=("cuda-standin")
  fi
fi

echo "== rustfmt --check rust/peermem_rs.rs"
if command -v rustfmt >/dev/null && rustfmt --edition 2021 --check "$TOP/rust/peermem_rs.rs"; then
  passed=$((passed + 1))
elif ! command -v rustfmt >/dev/null; then
  echo "no rustfmt on PATH (rustup component add rustfmt): skipped"; skipped=$((skipped + 1))
else
  failed=$((failed + 1)); failures+=(rustfmt)
fi

# One maintainer address and bug-report channel (CONTACT): every place
# agrees and none says localhost; and the check fails on a copy whose
# changelog is signed by someone else at localhost.
echo "== scripts/contact.sh: one maintainer address and bug-report channel"
out=$(bash "$TOP/scripts/contact.sh" check "$TOP" 2>&1); rc=$?
grep -v '^ok ' <<< "$out"
tmp=$(mktemp -d)
for f in $(bash "$TOP/scripts/contact.sh" files); do
  mkdir -p "$tmp/$(dirname "$f")" && cp "$TOP/$f" "$tmp/$f"
done
sed -i 's/^ -- .*  \(.*\)$/ -- someone <someone@localhost>  \1/' "$tmp/debian/changelog"
bad=$(bash "$TOP/scripts/contact.sh" check "$tmp" 2>&1); brc=$?
rm -rf "$tmp"
if [ $rc = 0 ] && [ $brc = 1 ] && grep -q '^FAIL debian/changelog: trailer' <<< "$bad" &&
   grep -q '^FAIL debian/changelog: says localhost' <<< "$bad"; then
  passed=$((passed + 1))
else
  [ $brc = 1 ] || echo "contact.sh passed a changelog signed by someone@localhost: $bad"
  failed=$((failed + 1)); failures+=("scripts/contact.sh")
fi

# script_checks SCRIPT: a script that prints "ok - ..."/"FAIL - ..." lines
# (its failures shown); a non-zero exit with no FAIL line counts as one.
script_checks() {
  local out rc p f
  echo "== $1"
  out=$(bash "$TOP/$1" 2>&1); rc=$?
  echo "$out" | grep -v '^ok ' | tail -n 40
  p=$(grep -c '^ok ' <<< "$out"); f=$(grep -c '^FAIL ' <<< "$out")
  [ $rc = 0 ] || [ "$f" -gt 0 ] || f=1
  passed=$((passed + p)); failed=$((failed + f))
  [ "$f" = 0 ] || failures+=("$1")
}
script_checks tests/bench/bench-selftest.sh
script_checks tests/hw/selftest.sh

echo
echo "== summary ($(( $(date +%s) - T0 )) s)"
[ ${#failures[@]} = 0 ] || printf 'FAILED: %s\n' "${failures[@]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
