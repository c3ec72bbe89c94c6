#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# tests/hw/selftest.sh -- tests of tests/hw/validate.sh without hardware:
# stand-ins for nvidia-smi, modprobe, modinfo, rmmod, perftest and
# peermem-probe on PATH, and a fake /sys (PEERMEM_SYSFS) with the module's
# debugfs stats, so that each verdict of the script is seen to come out: the
# dry run runs nothing and lists what the host lacks, peermem-rs passes the
# identity test (modinfo version, binding, srcversion) and NVIDIA's module or
# a stale build fails it, a perftest without CUDA stops the run with the
# build recipe, the client retries until its server is up and gives up after
# --wait, only the GPU side gets --use_cuda, the bandwidth criteria (into
# GPU >= ratio: FAIL below; out of GPU: WARN below), and the module's
# counters (a GPU run it did not count, or did not release, fails).
#   selftest.sh            prints "ok - ..." / "FAIL - ..." and a count; exit 1 on a failure
# shellcheck disable=SC2016 # the stand-ins' and bash -c's code is single-quoted on purpose
set -uo pipefail
V=$(cd "$(dirname "$0")" && pwd)/validate.sh
T=$(mktemp -d /tmp/hwselftest.XXXXXX)
trap 'rm -rf "$T"' EXIT
B=$T/bin ST=$T/state
mkdir -p "$B" "$ST"
npass=0 nfail=0
ok()  { echo "ok   - $*"; npass=$((npass + 1)); }
bad() { echo "FAIL - $*"; nfail=$((nfail + 1)); }
expect() { # expect DESC CMD...
  local d=$1; shift
  if "$@"; then ok "$d"; else bad "$d"; fi
}

# Every stand-in logs its call to $ST/calls. Behaviour comes from files in
# $ST: kind (ours|nvidia|nobinding: peermem-rs's parameters without its
# modinfo binding), cuda (yes|no), bw.<op>.<mem> (Gbit/s), refuse (the
# client never connects), late (failed connects before one works), nocount
# (GPU runs bypass the module: its counters stay), leak (a registration is
# never released), stale (the loaded module is another build than the file),
# fver (the file's version, default this checkout's).
stub() { printf '#!/bin/bash\necho "%s $*" >> %s/calls\n%s\n' "$1" "$ST" "$2" > "$B/$1"; chmod +x "$B/$1"; }
stub nvidia-smi "echo 'GPU 0: NVIDIA H100 (UUID: GPU-0)'; [ -e $ST/two ] && echo 'GPU 1: NVIDIA H100 (UUID: GPU-1)'; true"
# all_reduce_perf: $ST/nccl is "peermem" (a client NCCL sees: GDRDMA always)
# or "dmabuf" (no client: GDRDMA only while NCCL may use dma-buf).
stub all_reduce_perf "mode=\$(cat $ST/nccl) stats=\$PEERMEM_SYSFS/kernel/debug/nvidia_peermem/stats
if [ \$mode = peermem ] && [ \"\${NCCL_DMABUF_ENABLE:-1}\" = 0 ] && [ ! -e $ST/nocount ]; then
  awk '\$1 == \"registrations\" {\$2 += 4} {print}' \$stats > \$stats.new && mv \$stats.new \$stats; fi
if [ \$mode = peermem ] || [ \"\${NCCL_DMABUF_ENABLE:-1}\" != 0 ]; then
  echo \"NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\"
  [ \$mode = dmabuf ] && echo 'NCCL INFO DMA-BUF is available on GPU device 0'
  echo 'NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA'
else
  echo \"NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'\"
  echo 'NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0'
fi"
stub ibv_devinfo 'echo "hca_id: $2"'
# peermem-probe: exits with $ST/probe.<command> (default 0).
stub peermem-probe "exit \$(cat $ST/probe.\$1 2> /dev/null || echo 0)"
VERSION=$(cat "$(dirname "$V")/../../VERSION")
stub modprobe "[ \"\$1\" = nvidia_peermem ] || exit 0
kind=\$(cat $ST/kind); d=$T/sys/module/nvidia_peermem; mkdir -p \$d/parameters; echo $VERSION > \$d/version
if [ \$kind = nvidia ]; then echo 1 > \$d/parameters/persistent_api_support; echo 0 > \$d/parameters/peerdirect_support; echo NVSRC > \$d/srcversion
else echo auto > \$d/parameters/mode; echo nv_mem > \$d/parameters/peer_client_name
  if [ -e $ST/stale ]; then echo OLDSRC > \$d/srcversion; else echo RSSRC > \$d/srcversion; fi
  mkdir -p $T/sys/kernel/debug/nvidia_peermem; printf 'client nv_mem\nmode persistent\nlive_registrations 0\nregistrations 7\n' > $T/sys/kernel/debug/nvidia_peermem/stats; fi"
stub rmmod "rm -rf $T/sys/module/\$1 $T/sys/kernel/debug/\$1"
stub modinfo "kind=\$(cat $ST/kind)
case \$1.\${2:-} in -n.*) echo /lib/modules/test/updates/dkms/nvidia_peermem.ko;;
-F.parm) if [ \$kind = nvidia ]; then printf 'peerdirect_support:x\npersistent_api_support:y\n'; else printf 'peer_client_name:Name\nmode:auto\n'; fi;;
-F.version) if [ \$kind = nvidia ]; then echo 550.163.01; else cat $ST/fver 2>/dev/null || echo $VERSION; fi;;
-F.binding) [ \$kind = ours ] && echo 'crc: /usr/src/nvidia-550/Module.symvers /usr/src/ofed/Module.symvers'; true;;
-F.srcversion) if [ \$kind = nvidia ]; then echo NVSRC; else echo RSSRC; fi;; esac"
# id -u: root (not logged: the dry run may look it up).
printf '#!/bin/bash\necho 0\n' > "$B/id"; chmod +x "$B/id"
perftest='op=$(basename "$0")
[ "$1" = --help ] && { echo "Usage: $op [options]"; [ "$(cat ST/cuda)" = yes ] && echo "      --use_cuda=<cuda device id>"; exit 0; }
mem=host; size=0; for a in "$@"; do case $a in --use_cuda=*) mem=gpu;; esac; done
while [ $# -gt 0 ]; do case $1 in -s) size=$2; shift 2;; -d|-p) shift 2;; -*) shift;; *) host=$1; shift;; esac; done
stats=$PEERMEM_SYSFS/kernel/debug/nvidia_peermem/stats
if [ $mem = gpu ] && [ "$(cat ST/cuda)" = yes ] && [ -e "$stats" ] && [ ! -e ST/nocount ]; then   # the module registers the GPU buffer
  awk -v leak="$([ -e ST/leak ] && echo 1 || echo 0)" '\''$1 == "registrations" {$2++} $1 == "live_registrations" && leak {$2++} {print}'\'' "$stats" > "$stats.new" && mv "$stats.new" "$stats"; fi
if [ -z "${host:-}" ]; then   # server: wait for the client to finish, at most 10 s
  echo $mem > ST/srvmem
  for _ in $(seq 100); do [ -e ST/done ] && break; sleep 0.1; done; rm -f ST/done ST/srvmem; exit 0; fi
for _ in $(seq 20); do [ -e ST/srvmem ] && break; sleep 0.05; done   # a local server: the run is GPU if either side is
[ "$(cat ST/srvmem 2>/dev/null)" = gpu ] && mem=gpu
[ -e ST/refuse ] && { echo "Couldnt connect to $host:18515"; exit 1; }
n=$(cat ST/tries 2>/dev/null || echo 0); n=$((n + 1)); echo $n > ST/tries
[ $n -le "$(cat ST/late 2>/dev/null || echo 0)" ] && { echo "Couldnt connect to $host:18515"; exit 1; }
rm -f ST/tries
[ $mem = gpu ] && [ "$(cat ST/cuda)" != yes ] && { echo " Unsupported memory type"; exit 1; }
g=$(cat ST/bw.$op.$mem)
echo " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
echo " $size      5000           $g                 $g                   0.1"
touch ST/done'
for op in ib_write_bw ib_read_bw; do stub "$op" "${perftest//ST/$ST}"; done

setup() { # setup KIND CUDA HOST-W GPU-W HOST-R GPU-R [LATE]
  rm -rf "${T:?}/sys" "${ST:?}"/*; mkdir -p "$T/sys/class/infiniband/mlx5_0" "$T/sys/module/nvidia" "$T/sys/kernel/debug/tracing"
  echo "$1" > "$ST/kind"; echo "$2" > "$ST/cuda"
  echo "$3" > "$ST/bw.ib_write_bw.host"; echo "$4" > "$ST/bw.ib_write_bw.gpu"
  echo "$5" > "$ST/bw.ib_read_bw.host"; echo "$6" > "$ST/bw.ib_read_bw.gpu"
  echo "${7:-0}" > "$ST/late"; : > "$ST/calls"
}
val() { PATH=$B:$PATH PEERMEM_SYSFS=$T/sys bash "$V" "$@" 2>&1; }

# 1. The dry run prints the plan, the criteria and every command, and runs none.
setup ours yes 100 100 100 100
out=$(val --dry-run --nccl --peer 192.0.2.2); rc=$?
expect "dry run: exit 0" test $rc = 0
expect "dry run: nothing executed" test ! -s "$ST/calls"
for re in '^PLAN' '^PASS CRITERIA' 'parameters/\{mode,peer_client_name\}' 'GPU bandwidth >= 0.90 x the same' \
          'ratio below 0.90 is a WARN' 'GPU Direct RDMA Enabled' '/GDRDMA' '^\+ modprobe nvidia_peermem' \
          '^\+ ib_write_bw --help \| grep -- --use_cuda' 'git clone https://github.com/linux-rdma/perftest' \
          'CUDA_H_PATH=' 'ARGS="--serve' 'ib_read_bw .*--use_cuda=0 192\.0\.2\.2 .*retried' 'all_reduce_perf'; do
  expect "dry run prints: $re" grep -qE -- "$re" <<< "$out"
done

# 2. Ours, perftest with CUDA, writes into GPU at 95% of host, reads at 50%;
#    each client connects only on its second try (the server is "late").
setup ours yes 100 95 100 50 1
out=$(val --sizes "4096 65536 1048576" --wait 20); rc=$?
expect "healthy host: exit 0 (got $rc)" test $rc = 0 || echo "$out" | tail -30
expect "identity PASS: the loaded module is peermem-rs" grep -q 'PASS: the loaded nvidia_peermem is peermem-rs 0.1.0, mode=auto, client nv_mem' <<< "$out"
expect "identity PASS: modprobe loads peermem-rs" grep -q 'PASS: modprobe nvidia_peermem loads peermem-rs' <<< "$out"
expect "perftest PASS: --use_cuda" grep -q 'PASS: ib_write_bw has --use_cuda' <<< "$out"
expect "into GPU 1 MiB: ratio 0.95 PASS" grep -qE '^into_GPU +ib_write_bw +1048576 +11\.88 +12\.50 +0\.95 +PASS' <<< "$out"
expect "into GPU 4 KiB: reported only" grep -qE '^into_GPU +ib_write_bw +4096 .*reported only' <<< "$out"
expect "out of GPU 1 MiB: ratio 0.50 WARN, not FAIL" grep -qE '^out_of_GPU +ib_read_bw +1048576 .* 0\.50 +WARN' <<< "$out"
expect "only the GPU side gets --use_cuda: the loopback server" \
  test "$(grep -cE '^ib_(write|read)_bw -d mlx5_0 -s [0-9]+ -p 18515 -F --report_gbits --use_cuda=0$' "$ST/calls")" = 6
expect "... and never the client (the host-memory sender/receiver)" bash -c '! grep -q -- "--use_cuda=0 127.0.0.1" "$1"' _ "$ST/calls"
expect "counters: each GPU run went through peermem-rs" \
  test "$(grep -c 'PASS: ib_.*server gpu memory: through peermem-rs (1 registration(s), all released)' <<< "$out")" = 6
expect "identity PASS: modinfo version and binding" grep -qF "PASS: modprobe nvidia_peermem loads peermem-rs $VERSION (/lib/modules/test/updates/dkms/nvidia_peermem.ko), binding crc: " <<< "$out"
expect "identity PASS: the loaded module is the file (srcversion)" grep -q 'client nv_mem, srcversion RSSRC' <<< "$out"
expect "counters readable" grep -q 'PASS: the module.s counters are readable' <<< "$out"
expect "summary: 0 failures, 2 warnings" grep -q 'validate: 0 failure(s), 2 warning(s)' <<< "$out"
expect "the client retried until its server answered (2 tries per run)" \
  test "$(grep -c '^ib_write_bw .*127\.0\.0\.1$' "$ST/calls")" = 12

# 3. Writes into GPU at 50% of host: FAIL, exit 1.
setup ours yes 100 50 100 100
out=$(val --sizes 65536); rc=$?
expect "slow GPU writes: exit 1" test $rc = 1
expect "slow GPU writes: the FAIL names the size and the criterion" \
  grep -q 'FAIL: into GPU (ib_write_bw) 65536 bytes: GPU 6.25 GB/s vs host 12.50 GB/s (criterion: GPU >= 0.90 x host' <<< "$out"

# 4. NVIDIA's nvidia_peermem loaded and installed: identity FAILs.
setup nvidia yes 100 100 100 100
mkdir -p "$T/sys/module/nvidia_peermem/parameters"; touch "$T/sys/module/nvidia_peermem/parameters/persistent_api_support"
out=$(val --sizes 65536); rc=$?
expect "NVIDIA's module: exit 1" test $rc = 1
expect "NVIDIA's module on disk: FAIL names it" grep -q 'FAIL: modprobe nvidia_peermem loads /lib/modules/test/updates/dkms/nvidia_peermem.ko, which is not peermem-rs' <<< "$out"
expect "NVIDIA's module loaded: unloaded first" grep -q '^+ rmmod nvidia_peermem' <<< "$out"
expect "NVIDIA's module loaded again: FAIL says NVIDIA's" grep -q "FAIL: the loaded nvidia_peermem is NVIDIA's" <<< "$out"

# 5. Debian's perftest (no CUDA): FAIL with the recipe, no bandwidth run.
setup ours no 100 100 100 100
out=$(val --sizes 65536); rc=$?
expect "perftest without CUDA: exit 1" test $rc = 1
expect "perftest without CUDA: FAIL says so" grep -q 'FAIL: ib_write_bw has no CUDA support' <<< "$out"
expect "perftest without CUDA: the build recipe" grep -q 'configure CUDA_H_PATH=' <<< "$out"
expect "perftest without CUDA: no bandwidth run" bash -c '! grep -q -- "-s 65536" "$1"' _ "$ST/calls"

# 6. --peer whose server never answers: bounded by --wait, then FAIL.
setup ours yes 100 100 100 100; touch "$ST/refuse"
SECONDS=0
out=$(val --peer 192.0.2.2 --sizes 65536 --wait 2); rc=$?
expect "peer never up: exit 1" test $rc = 1
expect "peer never up: 'no server answered within 2s'" grep -q 'no server answered within 2s' <<< "$out"
expect "peer never up: bounded (8 runs x 2 s, took ${SECONDS}s)" test $SECONDS -le 40

# 7. Bad arguments: a clear message, exit 2.
for a in "--gpu -1" "--sizes 0" "--min-ratio 1.5" "--port 70000" "--peer x --serve" "--hca" "--bogus"; do
  # shellcheck disable=SC2086 # the words are the arguments
  out=$(val $a); rc=$?
  expect "validate.sh $a: exit 2 with a message ($out)" bash -c '[ "$1" = 2 ] && grep -q "^validate: " <<< "$2"' _ "$rc" "$out"
done

# 8. The dry run on one host with --nccl: NCCL_DMABUF_ENABLE=0 and the
#    conditional rmmod are printed (nothing is run).
setup ours yes 100 100 100 100
out=$(val --dry-run --nccl); rc=$?
expect "dry run --nccl: exit 0" test $rc = 0
expect "dry run --nccl: nothing executed" test ! -s "$ST/calls"
expect "dry run prints NCCL with NCCL_DMABUF_ENABLE=0" grep -qE '^\+ NCCL_DMABUF_ENABLE=0 .*all_reduce_perf' <<< "$out"
expect "dry run prints the conditional rmmod" grep -qE '^\+ rmmod nvidia_peermem +# only if' <<< "$out"

# 9. NCCL with a peer-memory client it sees: GDRDMA with dma-buf off: PASS.
setup ours yes 100 100 100 100; touch "$ST/two"; echo peermem > "$ST/nccl"
out=$(val --sizes 65536 --nccl); rc=$?
expect "NCCL through the client: exit 0 (got $rc)" test $rc = 0
expect "NCCL through the client: PASS" grep -q 'PASS: NCCL (NCCL_DMABUF_ENABLE=0): GPU Direct RDMA enabled and used' <<< "$out"
expect "NCCL ran with NCCL_DMABUF_ENABLE=0" grep -q '^all_reduce_perf -b 8M -e 256M' "$ST/calls"

# 10. A dma-buf-only host: NCCL's default log says Enabled and /GDRDMA, but
#     not through peermem-rs: with dma-buf off there is none: FAIL.
setup ours yes 100 100 100 100; touch "$ST/two"; echo dmabuf > "$ST/nccl"
out=$(val --sizes 65536 --nccl); rc=$?
expect "dma-buf-only NCCL log: exit 1 (got $rc)" test $rc = 1
expect "dma-buf-only NCCL log: FAIL" grep -q "FAIL: NCCL: no 'GPU Direct RDMA Enabled' line" <<< "$out"
expect "dma-buf-only NCCL log: says NCCL would take dma-buf" grep -q 'NCCL would take dma-buf' <<< "$out"

# 11. The module's counters did not move over the GPU runs (the buffer was
#     registered some other way): FAIL, whatever the bandwidth.
setup ours yes 100 100 100 100; touch "$ST/nocount"
out=$(val --sizes 65536); rc=$?
expect "counters still: exit 1 (got $rc)" test $rc = 1
expect "counters still: FAIL names the run and the counter" \
  grep -q 'FAIL: ib_write_bw 65536 bytes, client host memory, server gpu memory: peermem-rs counted no registration (registrations 7 -> 7)' <<< "$out"
expect "counters still: the table says why" grep -qE '^into_GPU +ib_write_bw +65536 .*FAIL \(not through peermem-rs: counters\)' <<< "$out"
expect "counters still: 2 failures (one per GPU run)" grep -q 'validate: 2 failure(s)' <<< "$out"
touch "$ST/two"; echo peermem > "$ST/nccl"
out=$(val --sizes 65536 --nccl); rc=$?
expect "counters still over NCCL: FAIL" grep -q 'FAIL: NCCL (NCCL_DMABUF_ENABLE=0): peermem-rs counted no registration' <<< "$out"

# 12. A registration the module never released: FAIL.
setup ours yes 100 100 100 100; touch "$ST/leak"
out=$(val --sizes 65536); rc=$?
expect "registration not released: exit 1" test $rc = 1
expect "registration not released: FAIL" grep -q 'FAIL: ib_read_bw 65536 bytes, client host memory, server gpu memory: 1 registration(s) not released after the run (live_registrations 1 -> 2)' <<< "$out"

# 13. Identity by modinfo: peermem-rs's parameter names without its binding
#     field (an impostor or a build before the field) fail; a loaded build
#     that is not the file modprobe loads fails; another version warns.
setup nobinding yes 100 100 100 100
out=$(val --sizes 65536); rc=$?
expect "no modinfo binding: exit 1" test $rc = 1
expect "no modinfo binding: FAIL says so" grep -q "which is not peermem-rs (no modinfo 'binding' field, version $VERSION" <<< "$out"
setup ours yes 100 100 100 100; touch "$ST/stale"
out=$(val --sizes 65536); rc=$?
expect "stale loaded build: exit 1" test $rc = 1
expect "stale loaded build: FAIL names both srcversions" grep -q 'FAIL: the loaded nvidia_peermem (srcversion OLDSRC) is not the file modprobe loads (.*srcversion RSSRC)' <<< "$out"
setup ours yes 100 100 100 100; echo 0.0.9 > "$ST/fver"
out=$(val --sizes 65536); rc=$?
expect "other version: exit 0, a WARN (got $rc)" test $rc = 0
expect "other version: WARN names both" grep -q "WARN: the installed peermem-rs is version '0.0.9', this checkout $VERSION" <<< "$out"

# 14. The dry run lists what this host lacks (lookups only, nothing run).
setup ours yes 100 100 100 100; rm -rf "$T/sys/module/nvidia" "$T/sys/class/infiniband/mlx5_0"
out=$(val --dry-run --nccl); rc=$?
expect "dry run, bare host: exit 0" test $rc = 0
expect "dry run, bare host: nothing executed" test ! -s "$ST/calls"
expect "dry run lists: no NVIDIA driver" grep -qE '^#   - the NVIDIA driver loaded' <<< "$out"
expect "dry run lists: no RDMA device" grep -qE '^#   - an RDMA device' <<< "$out"
expect "dry run prints the counters before and after each GPU run" \
  test "$(grep -c '^+ cat /sys/kernel/debug/nvidia_peermem/stats   # \(before\|after\)' <<< "$out")" = 14
expect "dry run prints the conditional debugfs mount" grep -qE '^\+ mount -t debugfs .*# only if' <<< "$out"
setup ours yes 100 100 100 100; touch "$ST/two"; echo peermem > "$ST/nccl"
out=$(val --dry-run --nccl)
expect "dry run, complete host: every prerequisite" grep -q '^# this host has every prerequisite' <<< "$out"

# 15. A host without what the run needs gets told so, and the run stops
#     there (issue 33): no /sys/class/infiniband at all (no RDMA stack
#     loaded); with --hca, perftest not installed (not "no CUDA support").
setup ours yes 100 100 100 100; rm -rf "$T/sys/class/infiniband"
out=$(val --sizes 65536); rc=$?
expect "no /sys/class/infiniband: exit 1 (got $rc)" test $rc = 1
expect "... says what is missing" grep -q 'FAIL: missing: an RDMA device' <<< "$out"
# A PATH without perftest: the stubs but ib_*_bw, and the system's tools
# but perftest's (the bench's chroot has perftest installed).
mkdir -p "$T/np-stubs" "$T/np-sys"
for f in "$B"/*; do case ${f##*/} in ib_*_bw) ;; *) ln -sf "$f" "$T/np-stubs/";; esac; done
for f in /usr/bin/* /bin/*; do case ${f##*/} in ib_*_bw|ib_*_lat) ;; *) [ -e "$T/np-sys/${f##*/}" ] || ln -s "$f" "$T/np-sys/";; esac; done
setup ours yes 100 100 100 100
out=$(PATH=$T/np-stubs:$T/np-sys PEERMEM_SYSFS=$T/sys bash "$V" --hca mlx5_0 --sizes 65536 2>&1); rc=$?
expect "perftest not installed, --hca given: exit 1 (got $rc)" test $rc = 1
expect "... FAIL names it as not installed" grep -q 'FAIL: missing: ib_write_bw (not on PATH)' <<< "$out"
expect "... the run stops after the prerequisites" bash -c '! grep -q "^== 2\." <<< "$1"' _ "$out"
expect "... and never says it has no CUDA support" bash -c '! grep -q "no CUDA support" <<< "$1"' _ "$out"

# 16. What the bench's VM run found (issue 34): a host without nvidia-smi
#     passes without --nccl (CUDA reaches the GPU); an --hca that does not
#     exist is a missing prerequisite; --iters is perftest's -n; check's
#     exit is a FAIL, doctor's a WARN.
mkdir -p "$T/nosmi"
for f in "$B"/*; do [ "${f##*/}" = nvidia-smi ] || ln -sf "$f" "$T/nosmi/"; done
setup ours yes 100 95 100 95
out=$(PATH=$T/nosmi:$PATH PEERMEM_SYSFS=$T/sys bash "$V" --sizes 65536 --iters 7 2>&1); rc=$?
if command -v nvidia-smi > /dev/null; then ok "no nvidia-smi: skipped (this host has one)"; else
  expect "no nvidia-smi, no --nccl: exit 0 (got $rc)" test $rc = 0 || echo "$out" | tail -20
  expect "... says the GPU is reached through CUDA" grep -q '^# nvidia-smi is not installed' <<< "$out"
fi
expect "--iters 7: every perftest run gets -n 7" \
  test "$(grep -cE '^ib_(write|read)_bw .* -n 7( |$)' "$ST/calls")" = "$(grep -E '^ib_(write|read)_bw ' "$ST/calls" | grep -cv -- --help)"
expect "... and there were runs" grep -qE '^ib_write_bw ' "$ST/calls"
expect "probe check exit 0: PASS" grep -q '^validate: PASS: peermem-probe check: GPUDirect RDMA works on mlx5_0, GPU 0' <<< "$out"
setup ours yes 100 95 100 95; echo 1 > "$ST/probe.check"; echo 3 > "$ST/probe.doctor"
out=$(val --sizes 65536); rc=$?
expect "probe check exit 1: exit 1 (got $rc)" test $rc = 1
expect "... FAIL names it" grep -q '^validate: FAIL: peermem-probe check exited 1: GPUDirect RDMA does not work on mlx5_0' <<< "$out"
expect "doctor exit 3: a WARN" grep -q '^validate: WARN: peermem-probe doctor could not assess part of this host (exit 3)' <<< "$out"
setup ours yes 100 95 100 95
out=$(val --hca mlx5_9 --sizes 65536); rc=$?
expect "--hca mlx5_9 (not there): exit 1 (got $rc)" test $rc = 1
expect "... a missing prerequisite naming the devices there" grep -q '^validate: FAIL: missing: the RDMA device --hca mlx5_9 (/sys/class/infiniband has mlx5_0 )' <<< "$out"
expect "... the run stops after the prerequisites" bash -c '! grep -q "^== 2\." <<< "$1"' _ "$out"
setup ours yes 100 95 100 95; rm -rf "$T/sys/module/nvidia"
out=$(val --sizes 65536); rc=$?
expect "no NVIDIA driver: exit 1 (got $rc)" test $rc = 1
expect "... names the P2P API" grep -q '^validate: FAIL: missing: the NVIDIA driver loaded (/sys/module/nvidia; or a module exporting nvidia_p2p_get_pages' <<< "$out"

echo "hw selftest: $npass passed, $nfail failed"
[ $nfail = 0 ]
