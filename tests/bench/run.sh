#!/bin/bash
# tests/bench/run.sh -- the suite behind `make test` (and `make demo`,
# `make vm-shell`, `make check`):
#   1. host prerequisites, the trixie chroot, and every kernel of the matrix
#      (Debian's with rebuilt Rust metadata, our 6.12 debug build), cached
#      under ~/.cache/peermem-rs/;
#   2. host-side tests: `cargo test` of every cargo project in the tree
#      (built with the chroot's pinned toolchain);
#   3. per kernel: build our modules, boot the VM, run the in-VM cases.
# Last line: "N passed, N failed, N skipped" over everything; exit 1 on any
# failure.
#   run.sh [--demo | --stress | --shell KVER | --host-only]
#   --stress: the stress-campaign case alone on KVER (default the newest
#   Debian kernel), with SEED, OPS, VARIANTS passed into the VM
#   KERNELS="k1 k2"  restrict the matrix;  CASES=a,b  run these cases instead
#   of tests/vm/suite.list;  STAGE=/peermem-x  a private stage in the chroot.
. "$(dirname "$0")/lib.sh"
mode=test
case "${1:-}" in
  --demo) mode=demo;; --stress) mode=stress;; --shell) mode=shell; SHELL_KVER=${2:-};; --host-only) mode=host;;
  "") ;; *) die "usage: run.sh [--demo | --stress | --shell KVER | --host-only]";;
esac
KERNELS=${KERNELS:-$MATRIX_KERNELS}
export STAGE
DEFAULT_KERNEL=${DEBIAN_KERNELS##* }
rm -rf "$RESULTS"; mkdir -p "$RESULTS"
T0=$(date +%s)
passed=0; failed=0; skipped=0; failures=()
record() { # record pass|fail|skip NAME
  case $1 in pass) passed=$((passed+1));; skip) skipped=$((skipped+1));; *) failed=$((failed+1)); failures+=("$2");; esac
}
summary() {
  echo
  echo "== summary ($(( $(date +%s) - T0 )) s)"
  [ ${#failures[@]} = 0 ] || printf 'FAILED: %s\n' "${failures[@]}"
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" = 0 ]
}
fatal() { echo "bench: $*" >&2; record fail "$1"; summary; exit 1; }

timed prereq bash "$BENCH/prereq.sh" || exit 1
timed chroot bash "$BENCH/chroot.sh" || fatal "chroot: building the trixie chroot failed"

# --- host-side tests ---------------------------------------------------------
# The cargo projects whose tests run on the host: the module's pure logic
# (built both in the kernel and as a host crate) and the userspace workspace.
HOST_CRATES="rust/logic userspace tests/simctl"
run_cargo_tests() { # run_cargo_tests [--build-only CRATE...]
  local d out rc=0 cainfo= crates=$HOST_CRATES test=yes
  [ "${1:-}" = --build-only ] && { test=no; shift; crates=$*; }
  # cargo in the chroot reaches crates.io with the host's CA bundle (which
  # may hold a site's TLS-inspecting proxy CA that the chroot's lacks).
  if [ -f "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" ]; then
    cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$ROOT/etc/ssl/certs/bench-host-ca.crt"
    cainfo=CARGO_HTTP_CAINFO=/etc/ssl/certs/bench-host-ca.crt
  fi
  # One target directory per stage and crate: cargo names a workspace's
  # artefacts by paths relative to it, so two stages building into one
  # directory would overwrite each other's libraries and binaries.
  local target
  for d in $crates; do
    [ -f "$TOP/$d/Cargo.toml" ] || continue
    target=/build/cargo-target$STAGE/$d
    mkdir -p "$ROOT$STAGE/host/$d" "$ROOT$target"
    rsync -a --delete --exclude=target "$TOP/$d/" "$ROOT$STAGE/host/$d/"
    if [ $test = yes ]; then
    log "cargo test: $d"
    out=$(in_root env $cainfo CARGO_TARGET_DIR="$target" CARGO_HOME=/root/.cargo \
          sh -c "cd $STAGE/host/$d && cargo test --locked --quiet 2>&1") || rc=1
    echo "$out" | tail -n 40
    echo "$out" | sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p' > "$RESULTS/cargo-$(echo "$d" | tr / _).counts"
    if ! grep -q . "$RESULTS/cargo-$(echo "$d" | tr / _).counts"; then echo "0 1 0" > "$RESULTS/cargo-$(echo "$d" | tr / _).counts"; fi
    fi
    # The userspace tools run in the VMs: stage their release binaries.
    if [ "$d" != rust/logic ]; then
      in_root env $cainfo CARGO_TARGET_DIR="$target" CARGO_HOME=/root/.cargo \
          sh -c "cd $STAGE/host/$d && cargo build --locked --release --quiet" ||
        { echo "cargo build --release of $d failed"; echo "0 1 0" >> "$RESULTS/cargo-$(echo "$d" | tr / _).counts"; rc=1; }
      mkdir -p "$ROOT$STAGE/bin"
      find "$ROOT$target/release" -maxdepth 1 -type f -executable -exec cp {} "$ROOT$STAGE/bin/" \;
    fi
  done
  return $rc
}
# The module's sources are rustfmt-clean (the kernel crate builds through
# clippy in build.sh).
rustfmt_check() {
  mkdir -p "$ROOT$STAGE/fmt"
  rsync -a --delete "$TOP/rust/" "$ROOT$STAGE/fmt/rust/"
  in_root rustfmt --edition 2021 --check "$STAGE/fmt/rust/peermem_rs.rs"
}
if [ "$mode" = test ] || [ "$mode" = host ]; then
  if timed rustfmt rustfmt_check; then record pass rustfmt; else record fail rustfmt; fi
  timed "cargo tests" run_cargo_tests || true
  for c in "$RESULTS"/cargo-*.counts; do
    [ -f "$c" ] || continue
    name=$(basename "$c" .counts)
    while read -r p f i; do
      passed=$((passed+p)); failed=$((failed+f)); skipped=$((skipped+i))
      [ "$f" = 0 ] || failures+=("$name")
    done < "$c"
  done
  [ "$mode" = host ] && { summary; exit $?; }
fi

# --- kernels -------------------------------------------------------------------
prepare_kernel() {
  if is_debug_kernel "$1"; then bash "$BENCH/kernel-debug.sh"; else bash "$BENCH/kernel-debian.sh" "$1"; fi
}
case $mode in
  shell)
    k=${SHELL_KVER:-$DEFAULT_KERNEL}
    prepare_kernel "$k" && bash "$BENCH/build.sh" "$k" || exit 1
    exec bash "$BENCH/vm.sh" "$k" shell ;;
  demo)
    # The demo drives the simulators with simctl: build and stage it.
    timed "simctl" run_cargo_tests --build-only tests/simctl || fatal "demo: building tests/simctl failed"
    KERNELS=${KVER:-$DEFAULT_KERNEL}; CASES=demo ;;
  stress)
    # The campaign drives the simulators with simctl: build and stage it.
    timed "simctl" run_cargo_tests --build-only tests/simctl || fatal "stress: building tests/simctl failed"
    KERNELS=${KVER:-$DEFAULT_KERNEL}; CASES=stress-campaign
    SEED=${SEED:-$(date +%s)}; OPS=${OPS:-20000}; VARIANTS=${VARIANTS:-current,mlnx-old,no-unmaps}
    # Limits from the operation count: 4 ms per operation is far above
    # what the Debian kernels need under TCG (about 1 ms), the debug
    # kernel gets ten times that.
    runs=$(( 2 * $(echo "$VARIANTS" | tr , '\n' | grep -c .) ))
    per_case=$(( 600 + runs * OPS * 4 / 1000 ))
    is_debug_kernel "$KERNELS" && per_case=$(( per_case * 10 ))
    export VM_TIMEOUT=$(( per_case + 600 ))
    echo "== stress campaign: seed $SEED, $OPS operations per run, variants $VARIANTS, kernel $KERNELS (limit ${per_case}s)"
    VM_APPEND="${VM_APPEND:-} stress_seed=$SEED stress_ops=$OPS stress_variants=$VARIANTS stress_failslab=${FAILSLAB:-0} CASE_TIMEOUT=$per_case" ;;
esac
# The negative controls (tests/vm/selfcheck.list), in a boot of their own:
# each must fail, for the reason its regex names.
selfcheck() {
  local k=$1 list out name re section
  list=$(grep -vE '^[[:space:]]*(#|$)' "$TOP/tests/vm/selfcheck.list" | cut -f1 | paste -sd,)
  out=$RESULTS/selfcheck-$k.out
  echo "-- $k: negative controls (each must be caught)"
  RESULTS=$RESULTS/selfcheck timed "selfcheck $k" bash "$BENCH/vm.sh" "$k" "$list" > "$out" 2>&1 || true
  while IFS=$'\t' read -r name re; do
    case "$name" in ''|'#'*) continue;; esac
    section=$(sed -n "/VMCASE-BEGIN $name\$/,/VMCASE-END $name /p" "$out")
    if echo "$section" | grep -q "VMCASE-END $name FAIL" && echo "$section" | grep -qE "$re"; then
      echo "ok   - control $name was caught ($re)"; record pass "selfcheck:$name"
    else
      echo "FAIL - control $name was NOT caught by the bench (wanted: $re)"; record fail "$k:selfcheck:$name"
    fi
  done < "$TOP/tests/vm/selfcheck.list"
}
[ -n "${CASES:-}" ] && CASES_GIVEN=1
# The packaging cases run in `make test`, or with PKG_TESTS=1 next to CASES=.
pkg_tests() { [ "$mode" = test ] && { [ -z "${CASES_GIVEN:-}" ] || [ "${PKG_TESTS:-}" = 1 ]; }; }
if [ -z "${CASES:-}" ]; then
  CASES=$(grep -vE '^[[:space:]]*(#|$)' "$TOP/tests/vm/suite.list" | paste -sd,)
fi

# The RDMA core variant each kernel's boot runs the module suite against
# (peer_core_sim variant=, see tests/sim/README.md): spread over the matrix
# instead of multiplying the cases.  CORE_VARIANT=... forces one.
core_variant_for() {
  if [ -n "${CORE_VARIANT:-}" ]; then echo "$CORE_VARIANT"; return; fi
  case $1 in
    7.2.*) echo mlnx-old;;          # sysfs memory_peers, page-shift SG regime
    "$DEBUG_KERNEL") echo no-unmaps;;  # a core that ignores INVALIDATE_UNMAPS
    *) echo current;;               # DOCA-OFED today: UNMAPS, no sysfs, trims
  esac
}

# The planted-bug modules (Kbuild PEERMEM_PLANT) are built only for a kernel
# whose boot runs a plant-* case: named in CASES, or the debug kernel's
# negative controls.
plants_for() {
  local names=",$CASES," p
  if [ "$mode" = test ] && [ -z "${CASES_GIVEN:-}" ] && is_debug_kernel "$1"; then
    names="$names$(grep -vE '^[[:space:]]*(#|$)' "$TOP/tests/vm/selfcheck.list" | cut -f1 | paste -sd,),"
  fi
  for p in put_in_callback use_after_callback leak_sg; do
    case $names in *,plant-${p//_/-},*) echo "$p";; esac
  done
}

for k in $KERNELS; do
  echo; echo "== kernel $k"
  PEERMEM_PLANTS=$(plants_for "$k" | paste -sd' '); export PEERMEM_PLANTS
  if ! timed "kernel $k" prepare_kernel "$k"; then record fail "kernel:$k"; continue; fi
  if ! timed "build $k" bash "$BENCH/build.sh" "$k"; then record fail "build:$k"; continue; fi
  # Packaging (tests/bench/pkg.sh): DKMS installs the module into the chroot
  # for the VM's pkg-modprobe case, and removes it after the VM.
  pkg_k=
  if pkg_tests && [[ ",$CASES," == *,pkg-modprobe,* ]]; then
    timed "dkms install $k" bash "$BENCH/pkg.sh" install "$k" || true; pkg_k=$k
  fi
  echo "-- $k: core variant $(core_variant_for "$k")"
  VM_APPEND="${VM_APPEND:-} core_variant=$(core_variant_for "$k")" \
    timed "vm $k" bash "$BENCH/vm.sh" "$k" "$CASES" > "$RESULTS/vm-$k.out" 2>&1 || true
  [ -z "$pkg_k" ] || timed "dkms remove $k" bash "$BENCH/pkg.sh" remove "$k" || true
  if [ "$mode" = demo ]; then
    sed -nE '/^VMCASE-BEGIN demo/,/^VMCASE-END demo/p' "$RESULTS/vm-$k.out" | grep -vE '^VMCASE-'
  elif [ "$mode" = stress ]; then
    sed -nE '/^VMCASE-BEGIN stress-campaign/,/^VMCASE-END stress-campaign/p' "$RESULTS/vm-$k.out" | grep -vE '^VMMARK'
    grep -E '^(VM died|VMSUMMARY)' "$RESULTS/vm-$k.out" || true
  else
    grep -vE '^VMMARK' "$RESULTS/vm-$k.out" | sed -nE '/^VMBOOT/,$p' | grep -E '^(ok|FAIL|skip|VMCASE-END|VM died|VMSUMMARY)' || true
  fi
  s=$(grep '^VMSUMMARY ' "$RESULTS/vm-$k.out" | tail -1)
  [ -n "$s" ] || { record fail "vm:$k"; continue; }
  p=$(echo "$s" | sed -nE 's/.* passed=([0-9]+).*/\1/p'); f=$(echo "$s" | sed -nE 's/.* failed=([0-9]+).*/\1/p')
  sk=$(echo "$s" | sed -nE 's/.* skipped=([0-9]+).*/\1/p'); fc=$(echo "$s" | sed -nE 's/.*failed_cases=(.*)$/\1/p')
  passed=$((passed+p)); failed=$((failed+f)); skipped=$((skipped+sk))
  for c in ${fc//,/ }; do failures+=("$k:$c"); done
  if [ "$mode" = test ] && [ -z "${CASES_GIVEN:-}" ] && is_debug_kernel "$k"; then selfcheck "$k"; fi
done
# Packaging cases run once per run, on the first prepared Debian kernel of the matrix.
if pkg_tests; then
  for k in $KERNELS; do
    is_debug_kernel "$k" && continue
    echo; echo "== packaging ($k)"
    timed "packaging" bash "$BENCH/pkg.sh" host "$k" || true
    break
  done
fi
for c in "$RESULTS"/pkg-*.counts; do
  [ -f "$c" ] || continue
  read -r p f i < "$c"
  passed=$((passed+p)); failed=$((failed+f)); skipped=$((skipped+i))
  [ "$f" = 0 ] || failures+=("$(basename "$c" .counts)")
done
summary
