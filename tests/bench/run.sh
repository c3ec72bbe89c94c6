#!/bin/bash
# tests/bench/run.sh -- the suite behind `make test` (and `make demo`,
# `make vm-shell`, `make check`):
#   1. host prerequisites, the trixie chroot, and every kernel of the matrix
#      (Debian's with rebuilt Rust metadata, our 7.3 debug build), cached
#      under ~/.cache/peermem-rs/;
#   2. host-side tests: `cargo test` of every cargo project in the tree
#      (built with the chroot's pinned toolchain);
#   3. per kernel: build our modules, boot the VM, run the in-VM cases.
# Last line: "N passed, N failed, N skipped" over everything; exit 1 on any
# failure.
#   run.sh [--demo | --quick | --cross | --bench | --stress | --shell KVER | --host-only]
#   --cross (make cross): the module cross-built for Debian's arm64 kernel
#   (tests/bench/cross-arm64.sh), alone: the cross-build's preparation (the
#   arm64 kernel's Rust metadata) costs minutes on a fresh machine.
#   --quick (make quick): the contributors' loop: one Debian kernel (KVER,
#   default the newest), every module-* case of tests/vm/suite.list in one
#   boot, whatever kernels the list gives them in make test; no host tests,
#   no packaging, no controls (make check and make test have those).
#   --bench (make bench): registration cost of the peer-memory clients under
#   test on the simulators' latency model, on one kernel (BENCH_KERNEL); see
#   tests/vm/cases/bench.sh for BENCH_CLIENTS and the other settings.
#   --stress (make stress): the stress-campaign case alone on KVER (default
#   the newest Debian kernel), with SEED, OPS, VARIANTS passed into the VM
#   KERNELS="k1 k2"  restrict the matrix;  CASES=a,b  run these cases instead
#   of tests/vm/suite.list;  STAGE=/peermem-x  a private stage in the chroot.
# make bench has a stage of its own: it may run next to make test.
[ "${1:-}" = --bench ] && : "${STAGE:=/peermem-bench}"
. "$(dirname "$0")/lib.sh"
mode=test
case "${1:-}" in
  --demo) mode=demo;; --quick) mode=quick;; --cross) mode=cross;; --bench) mode=bench;; --stress) mode=stress;; --shell) mode=shell; SHELL_KVER=${2:-};; --host-only) mode=host;;
  "") ;; *) die "usage: run.sh [--demo | --quick | --cross | --bench | --stress | --shell KVER | --host-only]";;
esac
KERNELS=${KERNELS:-$MATRIX_KERNELS}
export STAGE
# make test over more than one kernel keeps both cores busy with two lanes
# (below): the Debian kernels' VMs then run their two vCPUs on one host
# thread (BENCH_TWO_LANES, tests/bench/vm.sh), the guest still seeing two
# CPUs.  Two VMs of two vCPU threads each, or one beside a build,
# overcommit two cores, and a vCPU that spins on a lock whose holder's
# thread is not running burns its core: module-stress and stress-campaign
# on 7.2 took 88.6 s multi-threaded beside one busy loop and 57.0 s single
# (alone: 56.8 and 64.0); in fresh runs 7.2's VM took 226 s single against
# 348-386 s, 7.3's 545 s against 671-822.  The debug kernel's VMs stay
# multi-threaded: they are the longest path, and single-threaded its suite
# took longer (1233 s against 865-1076).  What it costs: a Debian guest's
# CPUs take turns, so its race cases' interleavings come from their forced
# windows (the simulators' hooks) and from preemption, not from
# simultaneous execution (the debug kernel keeps that); make stress, make
# quick and make bench run alone and keep the multi-threaded default.
# VM_TCG_THREAD=multi|single make test sets every VM.
if [ "$mode" = test ] && [ "$(wc -w <<< "$KERNELS")" -gt 1 ]; then
  export BENCH_TWO_LANES=1
fi
DEFAULT_KERNEL=${DEBIAN_KERNELS##* }
rm -rf "$RESULTS"; mkdir -p "$RESULTS"
T0=$(date +%s)
# Every step's times (lib.sh timed) and what the cached steps cost to build:
# the per-phase table at the end of make test (tests/bench/phases.sh).
BENCH_PHASES=$RESULTS/phases.tsv; export BENCH_FRESH=$RESULTS/fresh.tsv
passed=0; failed=0; skipped=0; failures=()
record() { # record pass|fail|skip NAME
  case $1 in pass) passed=$((passed+1));; skip) skipped=$((skipped+1));; *) failed=$((failed+1)); failures+=("$2");; esac
}
summary() {
  local ticks; cpu_ticks ticks
  [ "$mode" != test ] || bash "$BENCH/phases.sh" "$BENCH_PHASES" "$BENCH_FRESH" "$T0" "$(( ticks / CLK_TCK ))" || true
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
    # A crate whose binaries the VMs run is tested in the release profile
    # they are built with: one build of its dependencies, not two.
    local profile=--release
    [ "$d" = rust/logic ] && profile=
    # Niced while make test's lane builds the debug kernel: that build
    # starts the longest path (its VM and the controls come after it).
    local nice_=; [ -n "${BG_PID:-}" ] && [ ! -f "$RESULTS/lane-built" ] && nice_=nice
    if [ $test = yes ]; then
    log "cargo test${profile:+ $profile}: $d"
    out=$(in_root env $cainfo CARGO_TARGET_DIR="$target" CARGO_HOME=/root/.cargo \
          $nice_ sh -c "cd $STAGE/host/$d && cargo test $profile --locked --quiet 2>&1") || rc=1
    echo "$out" | tail -n 40
    echo "$out" | sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/\1 \2 \3/p' > "$RESULTS/cargo-$(echo "$d" | tr / _).counts"
    if ! grep -q . "$RESULTS/cargo-$(echo "$d" | tr / _).counts"; then echo "0 1 0" > "$RESULTS/cargo-$(echo "$d" | tr / _).counts"; fi
    fi
    # The userspace tools run in the VMs: stage their release binaries.
    if [ "$d" != rust/logic ]; then
      in_root env $cainfo CARGO_TARGET_DIR="$target" CARGO_HOME=/root/.cargo \
          $nice_ sh -c "cd $STAGE/host/$d && cargo build --locked --release --quiet" ||
        { echo "cargo build --release of $d failed"; echo "0 1 0" >> "$RESULTS/cargo-$(echo "$d" | tr / _).counts"; rc=1; }
      mkdir -p "$ROOT$STAGE/bin"
      # A VM may be running the staged binaries (make test builds the
      # crates' tests while the debug kernel's VM runs): a changed binary
      # replaces the staged one by a rename, never rewritten in place.
      local b
      for b in "$ROOT$target"/release/*; do
        [ -f "$b" ] && [ -x "$b" ] || continue
        cmp -s "$b" "$ROOT$STAGE/bin/${b##*/}" ||
          { cp "$b" "$ROOT$STAGE/bin/.${b##*/}.new" && mv -f "$ROOT$STAGE/bin/.${b##*/}.new" "$ROOT$STAGE/bin/${b##*/}"; }
      done
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
# One maintainer address and bug-report channel everywhere (CONTACT,
# scripts/contact.sh), as `make check` checks it.  (make check's other
# script, tests/hw/selftest.sh, runs in the packaging cases.)
contact_check() {
  if bash "$TOP/scripts/contact.sh" check "$TOP" > "$RESULTS/contact.out" 2>&1; then record pass contact; else
    grep -v '^ok ' "$RESULTS/contact.out"; record fail contact; fi
}
# The bench's own scripts on known inputs: the phase table, the debug
# kernel's cache key (tests/bench/bench-selftest.sh; make check runs it too).
bench_selfcheck() {
  local l
  while read -r l; do
    case $l in "ok   - "*) record pass bench-selftest;; "FAIL - "*) echo "$l"; record fail "bench-selftest: ${l#FAIL - }";; esac
  done < <(bash "$BENCH/bench-selftest.sh" 2>&1)
}
# The host-side tests: alone in run.sh --host-only; in make test with the
# lane (CARGO_LANE), the lane runs them after the debug kernel's VM, while
# it waits for hosts.sh (the foreground builds the userspace tools its
# VMs run first, and adds the counts up at the end), else at the start.
host_tests() {
  timed "cargo tests" run_cargo_tests || true
  host_counts
}
host_counts() {
  for c in "$RESULTS"/cargo-*.counts; do
    [ -f "$c" ] || continue
    name=$(basename "$c" .counts)
    while read -r p f i; do
      passed=$((passed+p)); failed=$((failed+f)); skipped=$((skipped+i))
      [ "$f" = 0 ] || failures+=("$name")
    done < "$c"
  done
}
if [ "$mode" = cross ]; then
  out=$(timed "cross arm64" bash "$BENCH/cross-arm64.sh" 2>&1) || true
  echo "$out"
  while read -r l; do
    case $l in "ok   - "*) record pass arm64;; "FAIL - "*) record fail "arm64: ${l#FAIL - }";; esac
  done <<< "$out"
  grep -q 'imports' <<< "$out" || record fail "arm64: the cross-build did not reach its last check"
  summary; exit $?
fi
if [ "$mode" = test ] || [ "$mode" = host ]; then
  if timed rustfmt rustfmt_check; then record pass rustfmt; else record fail rustfmt; fi
  contact_check
  bench_selfcheck
  if [ "$mode" = host ]; then host_tests; summary; exit $?; fi
fi

# --- kernels -------------------------------------------------------------------
prepare_kernel() {
  if is_debug_kernel "$1"; then bash "$BENCH/kernel-debug.sh"; else bash "$BENCH/kernel-debian.sh" "$1"; fi
}
# make bench's clients: ours, and for comparison the simulators' test client
# (tests/simclients) in two designs: one pin taken in acquire with merged SG
# entries, and a lighter nvidia-peermem shape (a one-page probe pin in
# acquire where NVIDIA's pins the whole range, the real pin in get_pages,
# one SG entry per 64 KiB page).  Our module under its
# detected name is one more entry: "nvidia_peermem.ko|nvidia_peermem (ours)|mode={mode}".
# And NVIDIA's own nvidia-peermem (tests/bench/nvidia-peermem.sh; the source
# of the driver an admin runs with NVIDIA_PEERMEM_SRC=DIR), in invalidate
# mode only (its persistent client, nv_mem_nc, is asked only for memory
# its nv_mem client declines), the simulated driver handing out v1 page
# tables as the 550 driver it was written for.
BENCH_NVIDIA_CLIENT="nvidia/nvidia-peermem.ko|nvidia-peermem (NVIDIA)||invalidate|pt_version=0x00010002"
BENCH_DEFAULT_CLIENTS="peermem_rs.ko|peermem_rs|mode={mode};$BENCH_NVIDIA_CLIENT"
BENCH_DEFAULT_CLIENTS+=";simclient_good.ko|simclient 1 pin, merged SG|persistent={persistent}"
BENCH_DEFAULT_CLIENTS+=";simclient_good.ko|simclient probe+pin, per-page SG|persistent={persistent} probe_acquire=1 coalesce=0"
# make bench: the settings file the in-VM case reads (<stage>/bench.conf).
# Clients given by a path outside the module directory (absolute, or a
# relative one that exists here) are copied into the stage (the VM sees
# only the chroot).
bench_conf() { # bench_conf STAGE_DIR_ON_HOST
  local spec ko label params modes simparams out= sep=
  mkdir -p "$1/bench-clients"
  IFS=';' read -r -a specs <<< "${BENCH_CLIENTS:-$BENCH_DEFAULT_CLIENTS}"
  for spec in "${specs[@]}"; do
    IFS='|' read -r ko label params modes simparams <<< "$spec"
    [ -n "$ko" ] && [ -n "$label" ] || { echo "bench: BENCH_CLIENTS entry '$spec' is not KO|LABEL|PARAMS[|MODES[|SIMPARAMS]]" >&2; return 1; }
    # (A relative path that is no file here names one of the module
    # directory's subdirectories, e.g. nvidia/nvidia-peermem.ko.)
    if [[ $ko == /* ]] || { [[ $ko == */* ]] && [ -e "$ko" ]; }; then
      [ -f "$ko" ] || { echo "bench: no such module: $ko" >&2; return 1; }
      cp "$ko" "$1/bench-clients/" && ko=$STAGE/bench-clients/$(basename "$ko")
    fi
    out="$out$sep$ko|$label|$params|$modes|$simparams"; sep=';'
  done
  printf 'BENCH_CLIENTS=%q\n' "$out"
  local v
  for v in BENCH_MODES BENCH_SIZES BENCH_SCALE_SIZES BENCH_SCALE_ITERS BENCH_CONC BENCH_LAT BENCH_MIXED BENCH_GDA; do
    [ -n "${!v+set}" ] && printf '%s=%q\n' "$v" "${!v}"
  done
  return 0
}
# The table (stdout, and bench.md), bench.json and bench.svg in $RESULTS.
bench_report() { # bench_report CONSOLE_OUTPUT
  local py=python3
  cp "$1" "$ROOT$STAGE/bench-console.log"
  if [ -x "$ROOT/usr/bin/python3" ]; then
    cp "$BENCH/bench-report.py" "$ROOT$STAGE/bench-report.py"
    mkdir -p "$ROOT$STAGE/bench-out"
    in_root python3 "$STAGE/bench-report.py" "$STAGE/bench-console.log" "$STAGE/bench-out" > "$RESULTS/bench.md" || return 1
    cp "$ROOT$STAGE/bench-out/bench.json" "$ROOT$STAGE/bench-out/bench.svg" "$RESULTS/"
  else
    command -v $py > /dev/null || { echo "bench: no python3 (chroot or host) for the report" >&2; return 1; }
    $py "$BENCH/bench-report.py" "$1" "$RESULTS" > "$RESULTS/bench.md" || return 1
  fi
  echo; cat "$RESULTS/bench.md"
  echo; echo "bench: $RESULTS/bench.json, $RESULTS/bench.svg, $RESULTS/bench.md"
}

case $mode in
  shell)
    k=${SHELL_KVER:-$DEFAULT_KERNEL}
    prepare_kernel "$k" && bash "$BENCH/build.sh" "$k" || exit 1
    exec bash "$BENCH/vm.sh" "$k" shell ;;
  quick)
    timed "simctl" run_cargo_tests --build-only tests/simctl || fatal "quick: building tests/simctl failed"
    KERNELS=${KVER:-$DEFAULT_KERNEL}
    is_debug_kernel "$KERNELS" && fatal "quick: KVER=$KERNELS: make quick boots a Debian kernel (make test CASES=... KERNELS=$KERNELS for the debug one)"
    CASES=$(grep -oE '^module-[a-z0-9-]+' "$TOP/tests/vm/suite.list" | grep -vx module-modversions | paste -sd,) ;;
  demo)
    # The demo drives the simulators with simctl: build and stage it.
    timed "simctl" run_cargo_tests --build-only tests/simctl || fatal "demo: building tests/simctl failed"
    KERNELS=${KVER:-$DEFAULT_KERNEL}; CASES=demo ;;
  bench)
    timed "simctl" run_cargo_tests --build-only tests/simctl || fatal "bench: building tests/simctl failed"
    KERNELS=${BENCH_KERNEL:-$DEFAULT_KERNEL}; CASES=bench
    bench_conf "$ROOT$STAGE" > "$ROOT$STAGE/bench.conf" || fatal "bench: bad BENCH_CLIENTS"
    # The whole measurement in one case (15 min is the budget of make bench).
    : "${VM_TIMEOUT:=1080}"; export VM_TIMEOUT
    VM_APPEND="${VM_APPEND:-} CASE_TIMEOUT=${BENCH_CASE_TIMEOUT:-1000}" ;;
  stress)
    # The campaign drives the simulators with simctl: build and stage it.
    timed "simctl" run_cargo_tests --build-only tests/simctl || fatal "stress: building tests/simctl failed"
    KERNELS=${KVER:-$DEFAULT_KERNEL}; CASES=stress-campaign
    SEED=${SEED:-$(date +%s)}; OPS=${OPS:-20000}; VARIANTS=${VARIANTS:-current,mlnx-old,no-unmaps}
    MODES=${MODES:-invalidate,persistent}
    [[ $OPS =~ ^[1-9][0-9]{0,8}$ ]] || fatal "stress: OPS=$OPS: a number of operations, 1 to 999999999"
    [[ $SEED =~ ^[0-9]{1,19}$ ]] || fatal "stress: SEED=$SEED: a decimal number"
    [[ ,$VARIANTS, =~ ^(,(current|mlnx-old|no-unmaps))+,$ ]] || fatal "stress: VARIANTS=$VARIANTS: a comma-separated list of current, mlnx-old, no-unmaps"
    [[ ,$MODES, =~ ^(,(invalidate|persistent))+,$ ]] || fatal "stress: MODES=$MODES: a comma-separated list of invalidate, persistent"
    # OPS is the campaign's total: one run per core variant and peermem_rs
    # mode, each with an equal share (rounded up).
    runs=$(( $(echo "$VARIANTS" | tr , '\n' | grep -c .) * $(echo "$MODES" | tr , '\n' | grep -c .) ))
    per_run=$(( (OPS + runs - 1) / runs ))
    # Limits from the operation count: 8 ms per operation is far above
    # what the Debian kernels need under TCG (about 3 ms with the bench's
    # 2 processes x 4 threads), the debug kernel gets ten times that.
    per_case=$(( 600 + runs * per_run * 8 / 1000 ))
    is_debug_kernel "$KERNELS" && per_case=$(( per_case * 10 ))
    export VM_TIMEOUT=$(( per_case + 600 ))
    echo "== stress campaign: seed $SEED, $OPS operations: $runs runs of $per_run (variants $VARIANTS x modes $MODES), kernel $KERNELS (limit ${per_case}s)"
    # A kernel log that holds a whole campaign's messages (a failure prints
    # the violation's call trace from it).
    VM_APPEND="${VM_APPEND:-} log_buf_len=64M stress_seed=$SEED stress_ops=$per_run stress_variants=$VARIANTS stress_modes=$MODES stress_failslab=${FAILSLAB:-0} CASE_TIMEOUT=$per_case" ;;
esac
# The negative controls (tests/vm/selfcheck.list), in a boot of their own:
# each must fail, for the reason its regex names.
# selfcheck_boot KVER: that boot (its console in selfcheck-KVER.out);
# `make test` boots it in the background lane right after the debug
# kernel's suite (SC_IN_LANE), beside the Debian kernels and the packaging
# cases; CASES=... with the controls named boots them alone.
# The host layouts (tests/bench/hosts.sh, host side, then the VM case
# host-layouts) ride in that boot too: host-layouts first, before any
# control has left a report or a leak behind.  `make test` runs hosts.sh
# in the foreground once the debug kernel's build is done, at a point where
# the chroot holds no DKMS install (hosts_when_built).
HOSTS_RC=
selfcheck_boot() {
  local k=$1 list
  list=$(grep -vE '^[[:space:]]*(#|$)' "$TOP/tests/vm/selfcheck.list" | cut -f1 | paste -sd,)
  if [ -z "$HOSTS_RC" ]; then hosts_step "$k" > "$RESULTS/hosts-$k.out" 2>&1; HOSTS_RC=$?; fi
  if [ "$HOSTS_RC" = 0 ]; then list="host-layouts,$list"; fi
  RESULTS=$RESULTS/selfcheck timed "selfcheck $k" bash "$BENCH/vm.sh" "$k" "$list" > "$RESULTS/selfcheck-$k.out" 2>&1 || true
}
# hosts_step KVER: tests/bench/hosts.sh for the debug kernel (its checks
# counted from hosts-KVER.counts at the end).
hosts_step() {
  is_debug_kernel "$1" || return 1
  timed "hosts $1" bash "$BENCH/hosts.sh" "$1"
}
# case_section CONSOLE NAME -- the lines case NAME printed in that boot,
# from its VMCASE-BEGIN to its VMCASE-END.
case_section() { sed -n "/VMCASE-BEGIN $2\$/,/VMCASE-END $2 /p" "$1"; }
# The verdicts of host-layouts in the boot whose console is FILE.
judge_host_layouts() { # judge_host_layouts FILE KVER
  local section p f
  section=$(case_section "$1" host-layouts)
  [ -n "$section" ] || { echo "FAIL - host-layouts did not run on $2"; record fail "$2:host-layouts"; return; }
  grep -E '^(ok|FAIL|skip) ' <<< "$section" || true
  p=$(grep -c '^ok ' <<< "$section" || true); f=$(grep -c '^FAIL ' <<< "$section" || true)
  passed=$((passed+p)); failed=$((failed+f))
  if [ "$f" != 0 ] || ! grep -q 'VMCASE-END host-layouts PASS' <<< "$section"; then failures+=("$2:host-layouts"); [ "$f" != 0 ] || failed=$((failed+1)); fi
}
# case_failed_for CONSOLE NAME ERE -- case NAME of that boot failed, and its
# section shows ERE.  Here-strings, not pipes: grep -q stops at the first
# match and, under pipefail, an echo still writing a long section (a KASAN
# report per operation) would die of SIGPIPE and fail the test.
case_failed_for() {
  local section
  section=$(case_section "$1" "$2")
  grep -q "VMCASE-END $2 FAIL" <<< "$section" && grep -qE "$3" <<< "$section"
}
# control_said CONSOLE NAME -- what a control that was not caught said: its
# verdict line (or that it never ended) and its first failures and infos.
control_said() {
  local section
  section=$(case_section "$1" "$2")
  if [ -z "$section" ]; then echo "    (no VMCASE-BEGIN $2 line in $1)"; return; fi
  grep -E "^(FAIL|info) |VMCASE-END $2 " <<< "$section" | head -n 12 | sed 's/^/    /'
  grep -q "VMCASE-END $2 " <<< "$section" || echo "    (no VMCASE-END $2 line: the VM died or its console split the line)"
}
selfcheck() { # selfcheck KVER: judge the controls (booting them first unless started)
  local k=$1 out=$RESULTS/selfcheck-$1.out
  echo "-- $k: negative controls (each must be caught)"
  # make test boots them in the background lane, which has ended by now.
  [ -n "${SC_IN_LANE:-}" ] || selfcheck_boot "$k"
  grep -E '^(TIME selfcheck|VMRETRY|VM stuck|VM died)' "$out" || true
  echo "-- $k: host layouts (tests/bench/hosts.sh, then host-layouts in that boot)"
  grep -E '^(ok|FAIL) |^    \|' "$RESULTS/hosts-$k.out" || true
  if [ -f "$RESULTS/hosts-$k.counts" ]; then judge_host_layouts "$out" "$k"; else echo "FAIL - hosts.sh did not run"; record fail "$k:hosts"; fi
  judge_controls "$out" "$k" selfcheck "$TOP/tests/vm/selfcheck.list"
}
# judge_controls CONSOLE KVER TAG LIST -- each negative control of LIST
# (name<TAB>ERE) must have failed in that boot, its section showing ERE.
judge_controls() {
  local out=$1 k=$2 tag=$3 name re
  while IFS=$'\t' read -r name re; do
    case "$name" in ''|'#'*) continue;; esac
    if case_failed_for "$out" "$name" "$re"; then
      echo "ok   - control $name was caught ($re)"; record pass "$tag:$name"
    else
      echo "FAIL - control $name was NOT caught by the bench (wanted: $re)"; record fail "$k:$tag:$name"
      control_said "$out" "$name"
    fi
  done < "$4"
}
# The control (tests/vm/nvpm.list): NVIDIA's own nvidia-peermem through the
# nvpm-* cases, in a boot of its own, each case judged by what its source
# says NVIDIA's module must do there.  `make test` runs it on the default
# Debian kernel; the pseudo-case nvpm-control in CASES on each kernel.
nvpm_control() { # nvpm_control KVER
  local k=$1 out=$RESULTS/nvpm-$1.out list name want re src
  echo "-- $k: control: NVIDIA's nvidia-peermem, each case as its source says"
  list=$(grep -vE '^[[:space:]]*(#|$)' "$TOP/tests/vm/nvpm.list" | cut -f1 | paste -sd,)
  VM_APPEND="${VM_APPEND:-} core_variant=$(core_variant_for "$k")" RESULTS=$RESULTS/nvpm \
    timed "control $k" bash "$BENCH/vm.sh" "$k" "$list" > "$out" 2>&1 || true
  grep -E '^(TIME control|VMRETRY|VM stuck|VM died|info)' "$out" || true
  while IFS=$'\t' read -r name want re src; do
    case "$name" in ''|'#'*) continue;; esac
    if [ "$want" = pass ]; then
      if grep -q "^VMCASE-END $name PASS" "$out"; then
        echo "ok   - control $name: NVIDIA's module passes, as its source says ($src)"; record pass "nvpm:$name"
      else
        echo "FAIL - control $name: NVIDIA's module fails where its source is right ($src): the bench is wrong"
        case_section "$out" "$name" | grep -E '^FAIL' | head -n 5
        record fail "$k:nvpm:$name"
      fi
    elif case_failed_for "$out" "$name" "$re"; then
      echo "ok   - control $name: NVIDIA's module fails, as its source says ($re; $src)"; record pass "nvpm:$name"
    else
      echo "FAIL - control $name: NVIDIA's module no longer fails for its weakness (wanted: $re; $src): a simulator lost its teeth"
      record fail "$k:nvpm:$name"
    fi
  done < "$TOP/tests/vm/nvpm.list"
}
NVPM_CONTROL=
if [[ ,${CASES:-}, == *,nvpm-control,* ]]; then
  NVPM_CONTROL=all; CASES=$(echo ",$CASES," | sed 's/,nvpm-control,/,/g; s/^,//; s/,$//')
  [ -n "$CASES" ] || CASES=-
fi
[ -n "${CASES:-}" ] && CASES_GIVEN=1
# The packaging cases run in `make test`, or with PKG_TESTS=1 next to CASES=.
pkg_tests() { [ "$mode" = test ] && { [ -z "${CASES_GIVEN:-}" ] || [ "${PKG_TESTS:-}" = 1 ]; }; }
# The first and the last Debian kernel of KERNELS (the matrix lists them
# oldest first).
NEWEST_IN_RUN=; OLDEST_IN_RUN=
for k in $KERNELS; do is_debug_kernel "$k" || { NEWEST_IN_RUN=$k; OLDEST_IN_RUN=${OLDEST_IN_RUN:-$k}; }; done
# scope_takes SCOPE KVER -- a suite.list scope (a comma list of all, debian,
# oldest, newest, debug) takes that kernel.
scope_takes() {
  local w
  for w in ${1//,/ }; do
    case $w in
      all) return 0;;
      debian) is_debug_kernel "$2" || return 0;;
      newest) [ "$2" = "$NEWEST_IN_RUN" ] && return 0;;
      oldest) [ "$2" = "$OLDEST_IN_RUN" ] && return 0;;
      debug) is_debug_kernel "$2" && return 0;;
      *) echo "bench: tests/vm/suite.list: unknown scope '$w' (all, debian, oldest, newest, debug)" >&2;;
    esac
  done
  return 1
}
# suite_cases [KVER]: tests/vm/suite.list's cases, in order; with KVER only
# those whose scope (second column) takes that kernel.
suite_cases() {
  local k=${1:-} name scope
  while read -r name scope; do
    case $name in ''|'#'*) continue;; esac
    [ -z "$k" ] || scope_takes "${scope:-all}" "$k" || continue
    echo "$name"
  done < "$TOP/tests/vm/suite.list" | paste -sd,
}
# cases_for KVER: the cases KVER's boot runs (CASES= as given, on every kernel).
cases_for() {
  if [ -n "${CASES_GIVEN:-}" ] || [ "$mode" != test ]; then echo "$CASES"
  elif [ "$1" = "${PERFTEST_BOOT:-}" ]; then
    suite_cases "$1" | tr , '\n' | { grep -vxE "${PERFTEST_SUITE_CASES//,/|}" || true; } | paste -sd,
  else suite_cases "$1"; fi
}
if [ -z "${CASES:-}" ]; then
  CASES=$(suite_cases)
  [ "$mode" = test ] && NVPM_CONTROL=$DEFAULT_KERNEL
fi
[ "$CASES" = - ] && CASES=
# nvpm_for KVER -- this kernel's build needs NVIDIA's nvidia-peermem: its
# control boot runs there, or a case of it.
nvpm_for() {
  [ "$NVPM_CONTROL" = all ] || [ "$NVPM_CONTROL" = "$1" ] || [[ ,$CASES, =~ ,(nvpm-|hwtest,) ]] ||
    { [ "$mode" = bench ] && [[ ${BENCH_CLIENTS:-$BENCH_DEFAULT_CLIENTS} == *nvidia/nvidia-peermem.ko* ]]; }
}

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

# The planted-bug modules (Kbuild PEERMEM_PLANT; tests/plants/<bug>.patch,
# case plant-<bug> with - for _) are built only for a kernel whose boot runs
# a plant-* case: named in CASES, or the debug kernel's negative controls.
plants_for() {
  local names=",$CASES," p f
  if [ "$mode" = test ] && [ -z "${CASES_GIVEN:-}" ] && is_debug_kernel "$1"; then
    names="$names$(grep -vE '^[[:space:]]*(#|$)' "$TOP/tests/vm/selfcheck.list" | cut -f1 | paste -sd,),"
  fi
  if [ "$mode" = test ] && [ -z "${CASES_GIVEN:-}" ] && [ "$1" = "$DEFAULT_KERNEL" ]; then
    names="$names$(iommu_controls),"
  fi
  for f in "$TOP"/tests/plants/*.patch; do
    p=$(basename "$f" .patch)
    case $names in *,plant-${p//_/-},*) echo "$p";; esac
  done
}

# perftest with CUDA (tests/bench/perftest-cuda.sh: cached, then staged) for
# a VM whose cases run it (perftest-cuda, perftest-big, hwtest, nvpm-perftest, demo),
# before it boots.  make test's perftest boot builds it in the background
# lane instead (perftest_boot), where no foreground case needs it.
runs_perftest() { [[ ",$1," =~ ,(perftest-cuda|perftest-big|hwtest|demo|nvpm-perftest), ]]; }
# The perftest boot's cases: those of tests/vm/suite.list (taken out of
# that kernel's own boot by cases_for), then NVIDIA's control.
PERFTEST_SUITE_CASES=perftest-cuda,hwtest
PERFTEST_BOOT_CASES=$PERFTEST_SUITE_CASES,nvpm-perftest
# The perftest boot is the IOMMU configuration (vm.sh VM_IOMMU=1): its
# negative controls (tests/vm/iommu-controls.list) run last in it, each
# judged by its regex (collect_perftest_boot), not counted by vm.sh.
iommu_controls() { grep -vE '^[[:space:]]*(#|$)' "$TOP/tests/vm/iommu-controls.list" | cut -f1 | paste -sd,; }
PERFTEST_DONE=
perftest_ready() {
  runs_perftest "$CASES" && [ -z "$PERFTEST_DONE" ] || return 0
  PERFTEST_DONE=1
  timed "perftest cuda" bash "$BENCH/perftest-cuda.sh" || record fail "perftest-cuda build"
}

# make test: the perftest boot, perftest-cuda, hwtest (make hwtest's
# validate.sh for real on the soft RDMA device) and NVIDIA's nvpm-perftest
# (perftest through its nvidia-peermem, which must pass) on the newest
# Debian kernel (PERFTEST_BOOT), runs in the background lane after the
# controls' boot, off the foreground's path: perftest built (the lane built
# it after the debug kernel: perftest_build), and once the foreground's
# build of that kernel is done ($RESULTS/built-KVER), into
# $RESULTS/perftest/; collected at the end (collect_perftest_boot).
perftest_build() {
  timed "perftest cuda" bash "$BENCH/perftest-cuda.sh" > "$RESULTS/perftest.out" 2>&1 ||
    touch "$RESULTS/perftest.failed"
}
perftest_boot() {
  local k=$PERFTEST_BOOT waited=0
  [ ! -f "$RESULTS/perftest.failed" ] || return 0
  while [ ! -f "$RESULTS/built-$k" ] && [ $waited -lt 3600 ]; do sleep 2; waited=$((waited + 2)); done
  [ "$(cat "$RESULTS/built-$k" 2>/dev/null)" = ok ] || return 0
  mkdir -p "$RESULTS/perftest"
  VM_IOMMU=1 VM_CONTROLS=$(iommu_controls) \
  VM_APPEND="${VM_APPEND:-} core_variant=$(core_variant_for "$k")" RESULTS=$RESULTS/perftest \
    timed "perftest boot $k" bash "$BENCH/vm.sh" "$k" "$PERFTEST_BOOT_CASES,$(iommu_controls)" > "$RESULTS/perftest/vm-$k.out" 2>&1 || true
}
collect_perftest_boot() {
  local k=$PERFTEST_BOOT
  echo; echo "== kernel $k: the perftest boot (${PERFTEST_BOOT_CASES//,/, }; in the background lane)"
  if [ -f "$RESULTS/perftest.failed" ]; then
    tail -n 20 "$RESULTS/perftest.out"
    echo "FAIL - the perftest boot did not run: building perftest with CUDA failed"; record fail "perftest-cuda build"; return
  fi
  if [ "$(cat "$RESULTS/built-$k" 2>/dev/null)" != ok ]; then
    echo "FAIL - the perftest boot did not run: the build of $k failed"; record fail "$k:perftest-boot"; return
  fi
  RESULTS=$RESULTS/perftest collect_vm "$k" || true
  echo "-- $k: the IOMMU configuration's negative controls (each must be caught)"
  judge_controls "$RESULTS/perftest/vm-$k.out" "$k" iommu-control "$TOP/tests/vm/iommu-controls.list"
}

# One kernel: prepare, build, (DKMS install), boot the VM with the cases.
# BG=1: all of it in the background lane (run_kernel_bg; collect_vm later).
# run_kernel KVER build-only: only the preparation and the build (make test
# does both Debian kernels' first, while the lane builds the debug kernel);
# a later run_kernel KVER takes them as done.
declare -A PREPARED=()
run_kernel() { # run_kernel KVER [build-only]
  local k=$1 only=${2:-} kcases
  kcases=$(cases_for "$1")
  local CASES=$kcases
  echo; echo "== kernel $k${only:+ (its preparation and build)}"
  PEERMEM_PLANTS=$(plants_for "$k" | paste -sd' '); export PEERMEM_PLANTS
  PEERMEM_NVIDIA=; if nvpm_for "$k"; then PEERMEM_NVIDIA=1; fi; export PEERMEM_NVIDIA
  if [ -n "${BG:-}" ]; then run_kernel_bg "$k"; return 0; fi
  case ${PREPARED[$k]:-} in
    ok) ;;
    failed) return 1;;
    *) PREPARED[$k]=failed; echo failed > "$RESULTS/built-$k.tmp"
       if ! timed "kernel $k" prepare_kernel "$k"; then record fail "kernel:$k"; mv "$RESULTS/built-$k.tmp" "$RESULTS/built-$k"; return 1; fi
       if ! timed "build $k" bash "$BENCH/build.sh" "$k"; then record fail "build:$k"; mv "$RESULTS/built-$k.tmp" "$RESULTS/built-$k"; return 1; fi
       PREPARED[$k]=ok; echo ok > "$RESULTS/built-$k"; rm -f "$RESULTS/built-$k.tmp";;
  esac
  [ -z "$only" ] || return 0
  # Packaging (tests/bench/pkg.sh): DKMS installs the module into the chroot
  # for the VM's pkg-modprobe case, and removes it after the VM.  Not for a
  # VM in the background: another kernel's install/uninstall would change
  # the chroot under it (its pkg-modprobe skips).
  pkg_k=
  # Not on the debug kernel (symbol versions): there DKMS would build the
  # weak fallback, no provider Module.symvers being installed in the
  # chroot, which the module refuses (module-modversions covers that).
  if pkg_tests && [[ ",$CASES," == *,pkg-modprobe,* ]] && ! is_debug_kernel "$k"; then
    hosts_when_built
    timed "dkms install $k" bash "$BENCH/pkg.sh" install "$k" || true; pkg_k=$k
  fi
  if [[ ",$CASES," == *,host-layouts,* ]] && is_debug_kernel "$k"; then
    hosts_step "$k" || true
  fi
  [ -n "$CASES" ] && echo "-- $k: core variant $(core_variant_for "$k")"
  perftest_ready
  if [ -n "$CASES" ]; then
    VM_APPEND="${VM_APPEND:-} core_variant=$(core_variant_for "$k")" \
      timed "vm $k" bash "$BENCH/vm.sh" "$k" "$CASES" > "$RESULTS/vm-$k.out" 2>&1 || true
    [ -z "$pkg_k" ] || timed "dkms remove $k" bash "$BENCH/pkg.sh" remove "$k" || true
    collect_vm "$k"
  fi
  if [ "$NVPM_CONTROL" = all ] || [ "$NVPM_CONTROL" = "$k" ]; then nvpm_control "$k"; fi
}
# The background lane (make test, the debug kernel): the kernel's
# preparation and build (its output in prepare-KVER.out), then its VM, then
# (CARGO_LANE=1) the cargo tests, then
# (CONTROLS_LANE=1) the negative controls' boot, once the foreground has run
# hosts.sh and said whether its layouts ride in that boot
# ($RESULTS/hosts.rc).  The lane says how its build ended in
# $RESULTS/lane-built ("ok", or the failed step's name), which the
# foreground reads before hosts.sh (hosts_when_built).  The lane starts
# first: the debug kernel's build, its VM and the controls are the longest
# path, and the foreground's work (host tests, the Debian kernels) fills the
# cores where that build runs on one.
run_kernel_bg() { # run_kernel_bg KVER
  local k=$1
  [ -n "$CASES" ] && echo "-- $k: core variant $(core_variant_for "$k") (in the background, from its build on)"
  rm -f "$RESULTS/lane-built" "$RESULTS/lane-cpu"
  {
    # Its CPU, for the steps of the foreground (lib.sh, timed); its steps
    # are marked as the lane's in the phases (phases.sh's projection).
    trap 'cpu_ticks lane_cpu; echo "$lane_cpu" > "$RESULTS/lane-cpu"' EXIT
    BENCH_IN_LANE=1
    if ! BENCH_LANE=1 timed "kernel $k" prepare_kernel "$k" > "$RESULTS/prepare-$k.out" 2>&1; then
      echo "kernel:$k" > "$RESULTS/lane-built"; exit 1
    fi
    if ! timed "build $k" bash "$BENCH/build.sh" "$k" >> "$RESULTS/prepare-$k.out" 2>&1; then
      echo "build:$k" > "$RESULTS/lane-built"; exit 1
    fi
    echo ok > "$RESULTS/lane-built"
    [ -z "${PERFTEST_BOOT:-}" ] || perftest_build
    VM_APPEND="${VM_APPEND:-} core_variant=$(core_variant_for "$k")" \
      timed "vm $k" bash "$BENCH/vm.sh" "$k" "$CASES" > "$RESULTS/vm-$k.out" 2>&1 || true
    [ -z "${CARGO_LANE:-}" ] || timed "cargo tests" run_cargo_tests > "$RESULTS/cargo-tests.out" 2>&1 || true
    if [ -n "${CONTROLS_LANE:-}" ]; then
      while [ ! -f "$RESULTS/hosts.rc" ]; do sleep 2; done
      HOSTS_RC=$(cat "$RESULTS/hosts.rc"); selfcheck_boot "$k"
    fi
    [ -z "${PERFTEST_BOOT:-}" ] || perftest_boot
  } &
  # shellcheck disable=SC2034 # (read by lib.sh's timed)
  BG_PID=$!; BENCH_LANE_PID=$BG_PID; BENCH_LANE_CPU=$RESULTS/lane-cpu
}
# hosts_when_built [--wait] -- make test: hosts.sh for the controls' boot
# (it reads the lane's build), run in the foreground while the chroot holds
# no DKMS install and nothing else changes it (hosts.sh's overlays have it
# as their lower layer): before a Debian kernel's DKMS install if the lane's
# build is done by then, else later; --wait (before the packaging cases,
# the last such point) waits for that build.  Once per run; the lane's
# controls' boot waits for its answer ($RESULTS/hosts.rc).
HOSTS_DONE=
hosts_when_built() {
  controls_too && [ -z "$HOSTS_DONE" ] || return 0
  local t0=$SECONDS
  if [ "${1:-}" = --wait ]; then
    while [ ! -f "$RESULTS/lane-built" ] && kill -0 "$BG_PID" 2>/dev/null; do sleep 2; done
    [ $((SECONDS - t0)) -lt 3 ] || echo "-- waited $((SECONDS - t0)) s for the build of $bg_k (hosts.sh reads it)"
  elif [ ! -f "$RESULTS/lane-built" ] && kill -0 "$BG_PID" 2>/dev/null; then
    return 0
  fi
  HOSTS_DONE=1
  if [ "$(cat "$RESULTS/lane-built" 2>/dev/null)" = ok ]; then
    hosts_step "$bg_k" > "$RESULTS/hosts-$bg_k.out" 2>&1; HOSTS_RC=$?
  else
    HOSTS_RC=1
  fi
  echo "$HOSTS_RC" > "$RESULTS/hosts.rc"
}
# The verdicts of kernel KVER's VM, and (make test, debug kernel) its
# negative controls.
collect_vm() { # collect_vm KVER
  local k=$1 s p f sk fc c
  if [ "$mode" = demo ]; then
    sed -nE '/^VMCASE-BEGIN demo/,/^VMCASE-END demo/p' "$RESULTS/vm-$k.out" | grep -vE '^VMCASE-' || true
  elif [ "$mode" = bench ]; then
    grep -E '^(ok|FAIL|info|latency model)' "$RESULTS/vm-$k.out" || true
    bench_report "$RESULTS/vm-$k.out" || record fail "bench-report:$k"
  elif [ "$mode" = stress ]; then
    sed -nE '/^VMCASE-BEGIN stress-campaign/,/^VMCASE-END stress-campaign/p' "$RESULTS/vm-$k.out" | grep -vE '^VMMARK' || true
    grep -E '^(VM died|VMSUMMARY)' "$RESULTS/vm-$k.out" || true
  else
    echo; echo "== kernel $k: verdicts"
    grep -vE '^VMMARK' "$RESULTS/vm-$k.out" | sed -nE '/^VMBOOT/,$p' | grep -E '^(ok|FAIL|skip|VMCASE-END|VM died|VMSUMMARY)' || true
    grep -E '^(TIME vm|VMRETRY|VM stuck)' "$RESULTS/vm-$k.out" || true
  fi
  s=$(grep '^VMSUMMARY ' "$RESULTS/vm-$k.out" | tail -1 || true)
  [ -n "$s" ] || { record fail "vm:$k"; return 1; }
  p=$(echo "$s" | sed -nE 's/.* passed=([0-9]+).*/\1/p'); f=$(echo "$s" | sed -nE 's/.* failed=([0-9]+).*/\1/p')
  sk=$(echo "$s" | sed -nE 's/.* skipped=([0-9]+).*/\1/p'); fc=$(echo "$s" | sed -nE 's/.*failed_cases=(.*)$/\1/p')
  passed=$((passed+p)); failed=$((failed+f)); skipped=$((skipped+sk))
  for c in ${fc//,/ }; do failures+=("$k:$c"); done
  if [ "$mode" = test ] && [ -z "${CASES_GIVEN:-}" ] && is_debug_kernel "$k"; then selfcheck "$k"; fi
}

bg_k=; BG_PID=
# make test with the debug kernel (KASAN, lockdep, kmemleak under TCG) and
# others: its build, its VM, then the negative controls' boot, run in the
# background lane (CONTROLS_LANE) while the foreground runs the host tests,
# the Debian kernels, hosts.sh (once that build is done) and the packaging
# cases: the longest path starts first.
controls_wanted() { [ "$mode" = test ] && [ -z "${CASES_GIVEN:-}" ]; }
for k in $KERNELS; do
  if [ "$mode" = test ] && is_debug_kernel "$k" && [ "$(echo $KERNELS | wc -w)" -gt 1 ]; then
    # The cases drive the simulators with simctl: staged before the VM boots.
    timed "simctl" run_cargo_tests --build-only tests/simctl || record fail "simctl"
    CONTROLS_LANE=; controls_wanted && CONTROLS_LANE=1
    PERFTEST_BOOT=
    if [ -z "${CASES_GIVEN:-}" ] && [[ " $KERNELS " == *" $DEFAULT_KERNEL "* ]] &&
       [[ ",$(suite_cases "$DEFAULT_KERNEL")," == *,perftest-cuda,* ]]; then
      PERFTEST_BOOT=$DEFAULT_KERNEL
    fi
    # The debug kernel's own cases run perftest (perftest-cuda): the lane
    # builds it before that VM when it builds it for the perftest boot;
    # without that boot, here, before the lane starts (staged once, so
    # that no foreground VM runs it while the lane restages it).
    if [ -z "$PERFTEST_BOOT" ] && runs_perftest "$(cases_for "$k")"; then perftest_ready; fi
    rm -f "$RESULTS/perftest.failed" "$RESULTS"/built-*
    if BG=1 CONTROLS_LANE=$CONTROLS_LANE CARGO_LANE=1 run_kernel "$k"; then bg_k=$k; fi
  fi
done
controls_too() { [ -n "$bg_k" ] && controls_wanted; }
# make test: the lane boots the negative controls (hosts_when_built runs
# their host side in the foreground).
controls_too && SC_IN_LANE=1
if [ "$mode" = test ]; then
  if [ -n "$bg_k" ]; then
    timed "userspace build" run_cargo_tests --build-only userspace || record fail "userspace build"
  else
    host_tests
  fi
fi
# make test with the lane: the Debian kernels' preparations and builds
# first, beside the debug kernel's build (they change the chroot, which
# hosts.sh then reads), then their DKMS installs and VMs.
if [ -n "$bg_k" ]; then
  for k in $KERNELS; do
    [ "$k" = "$bg_k" ] || is_debug_kernel "$k" || run_kernel "$k" build-only || true
  done
fi
for k in $KERNELS; do
  [ "$k" = "$bg_k" ] && continue
  if [ "$mode" = test ] && is_debug_kernel "$k" && [ "$(echo $KERNELS | wc -w)" -gt 1 ]; then continue; fi
  run_kernel "$k" || true
done
# Packaging cases run once per run, on the first prepared Debian kernel of the matrix.
hosts_when_built --wait
if pkg_tests; then
  for k in $KERNELS; do
    is_debug_kernel "$k" && continue
    echo; echo "== packaging ($k)"
    timed "packaging" bash "$BENCH/pkg.sh" host "$k" || true
    break
  done
fi
if [ -n "$bg_k" ]; then
  echo; echo "== kernel $bg_k: waiting for its VM"
  wait "$BG_PID" || true
  built=$(cat "$RESULTS/lane-built" 2>/dev/null || echo "lane:$bg_k")
  # The lane's cargo tests (CARGO_LANE), or, if the lane ended before them
  # (its build failed), here.
  if [ -f "$RESULTS/cargo-tests.out" ]; then
    grep -vE '^(running|test result|$)' "$RESULTS/cargo-tests.out" | tail -n 40; host_counts
  else
    host_tests
  fi
  if [ "$built" = ok ]; then
    grep -E '^(BUILD|TIME)' "$RESULTS/prepare-$bg_k.out" || true
    collect_vm "$bg_k" || true
  else
    tail -n 30 "$RESULTS/prepare-$bg_k.out"; record fail "$built"
  fi
  [ -z "${PERFTEST_BOOT:-}" ] || collect_perftest_boot
fi
for c in "$RESULTS"/pkg-*.counts "$RESULTS"/hosts-*.counts; do
  [ -f "$c" ] || continue
  read -r p f i < "$c"
  passed=$((passed+p)); failed=$((failed+f)); skipped=$((skipped+i))
  [ "$f" = 0 ] || failures+=("$(basename "$c" .counts)")
done
summary
