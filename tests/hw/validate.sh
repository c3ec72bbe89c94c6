#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# tests/hw/validate.sh -- validate peermem-rs on a real host with an NVIDIA
# GPU and a ConnectX HCA (MLNX_OFED/DOCA-OFED), as root (`make hwtest`).
#
#   validate.sh [--dry-run] [--gpu N] [--hca mlx5_0] [--sizes "65536 1048576 8388608"]
#               [--peer HOST | --serve] [--port P] [--wait SECONDS] [--min-ratio 0.90]
#               [--iters N] [--perftest DIR] [--nccl]
#
# The plan and the pass criteria are printed first (README, "On the real
# hardware"); --dry-run prints them and every command, and runs none.
#   1. prerequisites (driver, HCA, tools);
#   2. identity: the nvidia_peermem that modprobe loads, and the one that is
#      loaded, is peermem-rs: its own modinfo fields (version, binding; the
#      loaded module's srcversion is the file's), and its parameters mode +
#      peer_client_name (NVIDIA's has persistent_api_support + peerdirect_support);
#   3. perftest has CUDA (`ib_write_bw --help` lists --use_cuda; Debian's and
#      Ubuntu's packages do not: how to build one is printed);
#   4. peermem-probe doctor and check;
#   5. bandwidth, each message size: writes into GPU memory and reads out of
#      GPU memory, only the GPU side with --use_cuda (the other side host
#      memory), each against the same run host-to-host; the module's debugfs
#      counters before and after each GPU run: its registrations must grow;
#   6. with --nccl: NCCL all_reduce_perf with NCCL_DMABUF_ENABLE=0, its GPU
#      Direct RDMA lines and the module's counters.
# Without --peer the bandwidth runs loop back through the same HCA (the
# server holds the GPU buffer). With --peer HOST the servers run on HOST in
# host memory and the local client holds the GPU buffer: start
# `make hwtest ARGS="--serve ..."` there (same --sizes/--port); each client
# run retries until its server is up (--wait seconds, default 120 with
# --peer, 30 without). --iters N: messages per bandwidth run (perftest -n;
# default perftest's own). --dry-run also lists the prerequisites this host
# lacks. The GPU is reached through CUDA (libcuda, as perftest and
# peermem-probe use it); nvidia-smi is needed only for --nccl, and the
# driver is any module exporting NVIDIA's P2P API (nvidia_p2p_get_pages).
set -euo pipefail

DRY=no GPU=0 HCA='' PEER='' SERVE=no NCCL=no PORT=18515 WAIT='' MIN_RATIO=0.90
SIZES="65536 1048576 8388608" PERFTEST='' ITERS=''
need() { if [ $# -lt 2 ] || [ -z "$2" ]; then echo "validate: $1 needs a value (see --help)" >&2; exit 2; fi; }
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=yes; shift;;
    --gpu) need "$@"; GPU=$2; shift 2;;
    --hca) need "$@"; HCA=$2; shift 2;;
    --peer) need "$@"; PEER=$2; shift 2;;
    --serve) SERVE=yes; shift;;
    --sizes) need "$@"; SIZES=$2; shift 2;;
    --size) need "$@"; SIZES=$2; shift 2;;   # the old spelling: one size
    --port) need "$@"; PORT=$2; shift 2;;
    --wait) need "$@"; WAIT=$2; shift 2;;
    --min-ratio) need "$@"; MIN_RATIO=$2; shift 2;;
    --perftest) need "$@"; PERFTEST=$2; shift 2;;
    --iters) need "$@"; ITERS=$2; shift 2;;
    --nccl) NCCL=yes; shift;;
    -h|--help) sed -n '3,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0;;
    *) echo "validate: unknown option $1 (see --help)" >&2; exit 2;;
  esac
done
bad_arg() { echo "validate: $*" >&2; exit 2; }
[[ $GPU =~ ^[0-9]+$ ]] || bad_arg "--gpu '$GPU': a CUDA device ordinal, 0 or more"
if ! [[ $PORT =~ ^[0-9]+$ ]] || [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65535 ]; then bad_arg "--port '$PORT': 1-65535"; fi
[ -z "$WAIT" ] || [[ $WAIT =~ ^[0-9]+$ ]] || bad_arg "--wait '$WAIT': whole seconds"
[ -z "$ITERS" ] || [[ $ITERS =~ ^[1-9][0-9]*$ ]] || bad_arg "--iters '$ITERS': a number of messages, 1 or more"
[ -n "$WAIT" ] || { WAIT=30; [ -n "$PEER" ] && WAIT=120; }
[[ $MIN_RATIO =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || bad_arg "--min-ratio '$MIN_RATIO': a fraction from 0 to 1, e.g. 0.90"
for s in $SIZES; do if ! [[ $s =~ ^[0-9]+$ ]] || [ "$s" -eq 0 ]; then bad_arg "--sizes: '$s' is not a byte count"; fi; done
[ -n "$SIZES" ] || bad_arg "--sizes: no size"
[ -z "$PEER" ] || [ $SERVE = no ] || bad_arg "--peer and --serve exclude each other (--serve runs on the peer)"
[ -z "$PERFTEST" ] || [ -x "$PERFTEST/ib_write_bw" ] || [ $DRY = yes ] || bad_arg "--perftest $PERFTEST: no executable ib_write_bw there"
PT=${PERFTEST:+$PERFTEST/}
# PEERMEM_SYSFS stands in for /sys (tests/hw/selftest.sh); the messages say /sys.
SYS=${PEERMEM_SYSFS:-/sys}
# The module's counters (rust/stats.rs; debugfs directory = module name).
STATS=$SYS/kernel/debug/nvidia_peermem/stats
# The version of this checkout, which the installed module should be.
VERSION=$(cat "$(dirname "$0")/../../VERSION" 2>/dev/null || echo unknown)

FAILS=0 WARNS=0
exec 3>&1   # stdout, for what bw prints from inside $(...)
step() { echo; echo "== $*"; }
note() { echo "# $*"; }
fail() { echo "validate: FAIL: $*"; FAILS=$((FAILS + 1)); }
warn() { echo "validate: WARN: $*"; WARNS=$((WARNS + 1)); }
pass() { echo "validate: PASS: $*"; }
# run CMD... -- print it; run it unless --dry-run; a failure is counted.
run() {
  echo "+ $*"
  [ $DRY = yes ] && return 0
  "$@" || { fail "$*"; return 1; }
}

# The bandwidth runs, "OP CLIENT-MEMORY SERVER-MEMORY SIZE" (host|gpu); the
# client and --serve walk the same list. Only the GPU side gets --use_cuda:
# each GPU run has a host-to-host baseline of the same operation.
#   into GPU (the NIC writes into GPU memory): loopback, ib_write_bw from a
#     host-memory client into the server's GPU buffer; with a peer, ib_read_bw
#     of the peer's host memory into the local client's GPU buffer;
#   out of GPU (the NIC reads GPU memory): loopback, ib_read_bw of the
#     server's GPU buffer into a host-memory client; with a peer, ib_write_bw
#     from the local client's GPU buffer into the peer's host memory.
# gpu_run DIR -- "OP CLIENT SERVER" of the GPU run of DIR (into|outof).
gpu_run() {
  if [ -z "$PEER" ] && [ $SERVE = no ]; then
    case $1 in into) echo "ib_write_bw host gpu";; outof) echo "ib_read_bw host gpu";; esac
  else
    case $1 in into) echo "ib_read_bw gpu host";; outof) echo "ib_write_bw gpu host";; esac
  fi
}
runs() {
  local dir op cm sm s
  for dir in into outof; do
    read -r op cm sm <<< "$(gpu_run $dir)"
    for s in $SIZES; do echo "$op host host $s"; done
    for s in $SIZES; do echo "$op $cm $sm $s"; done
  done
}
dir_label() { case $1 in into) echo "into GPU";; outof) echo "out of GPU";; esac; }
args_of() { # args_of MEM SIZE -- perftest arguments of one run
  local a=(-d "$HCA" -s "$2" -p "$PORT" -F --report_gbits)
  [ -z "$ITERS" ] || a+=(-n "$ITERS")
  [ "$1" = gpu ] && a+=(--use_cuda="$GPU")
  echo "${a[*]}"
}

if [ -z "$HCA" ]; then
  if [ $DRY = yes ]; then HCA=mlx5_0
  # No /sys/class/infiniband (no RDMA stack loaded) is not an error here:
  # the prerequisites below say it.
  else HCA=$(find "$SYS/class/infiniband" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort | head -1 || true); fi
fi

# shellcheck disable=SC2016 # printed for the admin to paste: $(nproc) and $PWD expand there
PERFTEST_BUILD='apt install git autoconf automake libtool make gcc libibverbs-dev librdmacm-dev libibumad-dev libpci-dev   # RHEL-like: dnf install git autoconf automake libtool make gcc rdma-core-devel libibumad-devel pciutils-devel
    git clone https://github.com/linux-rdma/perftest && cd perftest
    ./autogen.sh && ./configure CUDA_H_PATH=/usr/local/cuda/include/cuda.h && make -j"$(nproc)"   # cuda.h of the CUDA toolkit (Debian: nvidia-cuda-dev, /usr/include/cuda.h)
    make install   # to /usr/local/bin, ahead of /usr/bin; or keep the tree and pass --perftest "$PWD"'

# ---------------------------------------------------------------------------
echo "peermem-rs hardware validation ($(date -u +%FT%TZ), host $(uname -n), kernel $(uname -r))"
echo
echo "PLAN"
if [ $SERVE = yes ]; then
  echo "  serve the bandwidth runs of a peer's \`make hwtest ARGS=\"--peer $(uname -n) ...\"\`, in its order:"
  runs | sed 's/^/    /'
else
  echo "  1. prerequisites: the NVIDIA driver's P2P API, ibv_devinfo, ${PT}ib_write_bw, ${PT}ib_read_bw, peermem-probe, modprobe, modinfo, debugfs$( [ $NCCL = yes ] && echo ", nvidia-smi, all_reduce_perf")"
  echo "  2. identity: modprobe nvidia_peermem must load peermem-rs, not NVIDIA's module of the same name"
  echo "  3. perftest has CUDA: ${PT}ib_write_bw --help lists --use_cuda"
  echo "  4. peermem-probe doctor, peermem-probe check -d ${HCA:-<HCA>} -g $GPU"
  echo "  5. bandwidth on ${HCA:-<no RDMA device found>}, GPU $GPU, $( [ -n "$PEER" ] && echo "servers on $PEER in host memory (run there: make hwtest ARGS=\"--serve --hca <its HCA> --sizes '$SIZES' --port $PORT\")" || echo "loopback through ${HCA:-it}"),"
  echo "     OP CLIENT-MEMORY SERVER-MEMORY SIZE (only the GPU side gets --use_cuda=$GPU):"
  runs | sed 's/^/     /'
  [ $NCCL = yes ] && echo "  6. NCCL all_reduce_perf with NCCL_DEBUG=INFO" || echo "  6. NCCL: not run (--nccl)"
  echo
  echo "PASS CRITERIA"
  echo "  identity  modinfo -F binding nvidia_peermem is set (only peermem-rs has the field) and -F version is"
  echo "            this checkout's $VERSION (else WARN); the loaded module's /sys/module/nvidia_peermem/srcversion"
  echo "            is the file's (modinfo -F srcversion) and its parameters/{mode,peer_client_name} exist"
  echo "  perftest  ${PT}ib_write_bw --help mentions --use_cuda"
  echo "  probe     peermem-probe check exits 0 (GPUDirect RDMA works; doctor's findings are reported, a WARN)"
  echo "  counters  /sys/kernel/debug/nvidia_peermem/stats read before and after each GPU run: 'registrations'"
  echo "            grew (the GPU buffer was registered through peermem-rs, not dma-buf or another client)"
  echo "            and 'live_registrations' came back (each registration released)"
  echo "  into GPU  (the NIC writes into GPU memory, host-memory sender): GPU bandwidth >= $MIN_RATIO x the same"
  echo "            run host-to-host at every message size >= 64 KiB; below 64 KiB reported only"
  echo "  out of GPU (the NIC reads GPU memory, host-memory receiver): must run and report bandwidth; a"
  echo "            GPU/host ratio below $MIN_RATIO is a WARN, not a FAIL: reads from GPU memory are limited by"
  echo "            some CPUs/root complexes whatever the client does (docs/facts/field-notes.md)"
  [ $NCCL = yes ] && {
  echo "  NCCL      run with NCCL_DMABUF_ENABLE=0 (else NCCL's dma-buf path prints the same lines): the log has"
  echo "            'GPU Direct RDMA Enabled' (NCCL sees the client) and '/GDRDMA' (NCCL uses it); a second short"
  echo "            run with NCCL's defaults only reports whether NCCL would have chosen dma-buf; the module's"
  echo "            'registrations' grew over the first run"; }
fi

# ---------------------------------------------------------------------------
# bw OP CLIENT-MEM SERVER-MEM SIZE -- one perftest run; prints GB/s on
# stdout (or n/a).
bw() {
  local op=$1 cm=$2 sm=$3 size=$4 server=127.0.0.1 out gbits srv='' deadline i=0 mem=host
  local -a args sargs
  read -ra args <<< "$(args_of "$cm" "$size")"
  read -ra sargs <<< "$(args_of "$sm" "$size")"
  if [ "$cm" = gpu ] || [ "$sm" = gpu ]; then mem=gpu; fi
  if [ -n "$PEER" ]; then
    server=$PEER
  else
    echo "+ ${PT}$op ${sargs[*]} &" >&3
    if [ $DRY = no ]; then "${PT}$op" "${sargs[@]}" > /dev/null 2>&1 & srv=$!; fi
  fi
  echo "+ ${PT}$op ${args[*]} $server   # retried until the server answers, at most ${WAIT}s" >&3
  if [ $DRY = yes ]; then echo n/a; return 0; fi
  deadline=$((SECONDS + WAIT))
  while :; do
    i=$((i + 1))
    if out=$("${PT}$op" "${args[@]}" "$server" 2>&1); then break; fi
    case $out in *"Unsupported memory type"*|*"unrecognized option"*)
      [ -n "$srv" ] && kill "$srv" 2> /dev/null
      echo "validate: $op: this perftest has no CUDA support" >&2; echo n/a; return 1;; esac
    if [ -n "$srv" ] && ! kill -0 "$srv" 2> /dev/null; then
      echo "$out" | tail -5 >&2; echo "validate: $op ($mem memory, $size bytes): the local server exited" >&2; echo n/a; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "$out" | tail -5 >&2
      echo "validate: $op ($mem memory, $size bytes): no server answered within ${WAIT}s ($i attempts)" >&2
      [ -n "$srv" ] && kill "$srv" 2> /dev/null
      echo n/a; return 1
    fi
    sleep 1
  done
  if [ -n "$srv" ]; then wait "$srv" 2> /dev/null || true; fi
  case $out in *"Unsupported memory type"*|*"unrecognized option"*use_cuda*)
    echo "validate: $op: this perftest has no CUDA support" >&2; echo n/a; return 1;; esac
  gbits=$(awk -v s="$size" '$1 == s && NF >= 4 {print $4}' <<< "$out" | tail -1)
  if [ -z "$gbits" ]; then echo "$out" | tail -5 >&2; echo "validate: $op ($mem memory) reported no bandwidth" >&2; echo n/a; return 1; fi
  awk -v g="$gbits" 'BEGIN {printf "%.2f\n", g / 8}'
}
ratio() { if [ "$1" = n/a ] || [ "$2" = n/a ]; then echo n/a; else awk -v g="$1" -v h="$2" 'BEGIN {printf "%.2f", (h > 0 ? g / h : 0)}'; fi; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a >= b)}'; }

# counters -- "registrations live_registrations" from the module's stats
# (empty when unreadable).
counters() {
  awk '$1 == "registrations" {r = $2} $1 == "live_registrations" {l = $2}
       END {if (r != "" && l != "") print r, l}' "$STATS" 2> /dev/null || true
}
# moved WHAT BEFORE -- the verdict on the counters over a GPU run.
moved() {
  local what=$1 before=$2 after r0 l0 r1 l1
  after=$(counters)
  if [ -z "$before" ] || [ -z "$after" ]; then
    fail "$what: cannot read $STATS (mounted debugfs? root?): no proof the run went through peermem-rs"; return 1
  fi
  read -r r0 l0 <<< "$before"; read -r r1 l1 <<< "$after"
  if [ "$r1" -le "$r0" ]; then
    fail "$what: peermem-rs counted no registration (registrations $r0 -> $r1): the GPU buffer was not registered" \
      "through it (dma-buf, or another peer-memory client: cat /sys/kernel/mm/memory_peers/*/version, lsmod)"; return 1
  fi
  if [ "$l1" -gt "$l0" ]; then
    fail "$what: $((l1 - l0)) registration(s) not released after the run (live_registrations $l0 -> $l1)"; return 1
  fi
  pass "$what: through peermem-rs ($((r1 - r0)) registration(s), all released)"
}
stats_cmd() { echo "+ cat /sys/kernel/debug/nvidia_peermem/stats   # $1" >&3; }

# --serve: the server side of a peer's run, in the same order.
if [ $SERVE = yes ]; then
  step "serving $(runs | wc -l) perftest runs on $HCA, port $PORT"
  while read -r op cm sm size; do
    read -ra args <<< "$(args_of "$sm" "$size")"
    echo "+ ${PT}$op ${args[*]}"
    [ $DRY = yes ] && continue
    "${PT}$op" "${args[@]}" > /dev/null 2>&1 || fail "$op $sm $size (server)"
  done < <(runs)
  [ $DRY = yes ] && { echo; echo "validate: dry run: nothing was run"; exit 0; }
  echo "validate: served; $FAILS failure(s)"; [ "$FAILS" = 0 ]; exit
fi

# ---------------------------------------------------------------------------
step "1. prerequisites"
# p2p_api -- NVIDIA's P2P API is there: nvidia.ko (proprietary or open) is
# loaded, or another module exports the API (what peermem-rs binds to).
p2p_api() {
  [ -d "$SYS/module/nvidia" ] || grep -qw nvidia_p2p_get_pages /proc/kallsyms 2> /dev/null
}
TOOLS="ibv_devinfo ${PT}ib_write_bw ${PT}ib_read_bw peermem-probe modprobe modinfo"
[ $NCCL = no ] || TOOLS="$TOOLS nvidia-smi"
# lacks -- what this host lacks for the run, one line each (lookups only:
# nothing is run, so the dry run can say it too).
lacks() {
  local t
  for t in $TOOLS; do
    command -v "$t" > /dev/null || echo "$t (not on PATH)"
  done
  [ $NCCL = no ] || command -v all_reduce_perf > /dev/null || echo "all_reduce_perf (nccl-tests, for --nccl)"
  [ "$(id -u)" = 0 ] || echo "root (modprobe, rmmod, the debugfs counters)"
  if [ -z "$(find "$SYS/class/infiniband" -mindepth 1 -maxdepth 1 2> /dev/null)" ]; then
    echo "an RDMA device (/sys/class/infiniband is empty)"
  elif [ $DRY = no ] && [ ! -e "$SYS/class/infiniband/$HCA" ]; then
    echo "the RDMA device --hca $HCA (/sys/class/infiniband has $(find "$SYS/class/infiniband" -mindepth 1 -maxdepth 1 -printf '%f ' 2> /dev/null))"
  fi
  p2p_api || echo "the NVIDIA driver loaded (/sys/module/nvidia; or a module exporting nvidia_p2p_get_pages: modprobe nvidia)"
  [ -d "$SYS/kernel/debug/tracing" ] || [ -d "$SYS/kernel/debug/nvidia_peermem" ] ||
    echo "debugfs mounted at /sys/kernel/debug (the run mounts it: mount -t debugfs none /sys/kernel/debug)"
}
for t in $TOOLS; do echo "+ command -v $t"; done
missing=$(lacks)
if [ $DRY = yes ]; then
  if [ -n "$missing" ]; then note "this host lacks:"; while IFS= read -r l; do echo "#   - $l"; done <<< "$missing"
  else note "this host has every prerequisite"; fi
else
  while read -r m; do [ -z "$m" ] || case $m in debugfs*) ;; *) fail "missing: $m";; esac; done <<< "$missing"
fi
if command -v nvidia-smi > /dev/null || [ $DRY = yes ]; then run nvidia-smi -L || true
else note "nvidia-smi is not installed: the GPU is reached through CUDA (step 4 lists it)"; fi
# Nothing after this step can mean anything without them (no RDMA device
# means no HCA to run on; a perftest that is not installed would read as
# one without CUDA): stop here.
if [ $DRY = no ] && [ "$FAILS" -gt 0 ]; then
  echo "validate: stopping after the prerequisites: install what is missing above, then run again"
  echo "validate: $FAILS failure(s)"; exit 1
fi
run ibv_devinfo -d "$HCA" || true

step "2. identity: is nvidia_peermem peermem-rs?"
M=$SYS/module/nvidia_peermem P=$SYS/module/nvidia_peermem/parameters
echo "+ modinfo -n nvidia_peermem; modinfo -F version|binding|srcversion|parm nvidia_peermem   # the file modprobe loads"
if [ $DRY = no ]; then
  file=$(modinfo -n nvidia_peermem 2>/dev/null || true)
  parms=$(modinfo -F parm nvidia_peermem 2>/dev/null || true)
  fver=$(modinfo -F version nvidia_peermem 2>/dev/null || true)
  binding=$(modinfo -F binding nvidia_peermem 2>/dev/null || true)
  fsrc=$(modinfo -F srcversion nvidia_peermem 2>/dev/null || true)
  if [ -z "$file" ]; then
    fail "no nvidia_peermem module for $(uname -r): install peermem-rs-dkms (dkms status peermem-rs)"
  elif [ -n "$binding" ] && grep -q '^peer_client_name:' <<< "$parms"; then
    pass "modprobe nvidia_peermem loads peermem-rs $fver ($file), binding $binding"
    [ "$fver" = "$VERSION" ] || warn "the installed peermem-rs is version '$fver', this checkout $VERSION: the run tests the installed one"
    case $binding in weak:*)
      warn "its binding is '$binding': built without the providers' Module.symvers (unversioned; refused on a kernel with symbol versions unless allow_unversioned=1): peermem-rs-refresh";;
    esac
  else
    fail "modprobe nvidia_peermem loads $file, which is not peermem-rs (no modinfo 'binding' field$( [ -n "$fver" ] && echo ", version $fver"); its parameters: $(cut -d: -f1 <<< "$parms" | tr '\n' ' '));" \
      "depmod must prefer updates/dkms: check /etc/depmod.d/peermem-rs.conf, run depmod -a, dkms status peermem-rs"
  fi
fi
if [ $DRY = yes ]; then
  echo "+ rmmod nvidia_peermem   # only if a loaded nvidia_peermem is not peermem-rs (it has no parameters/peer_client_name)"
elif [ -d "$M" ] && [ ! -e "$P/peer_client_name" ]; then
  note "an nvidia_peermem that is not peermem-rs is loaded: unloading it (rmmod nvidia_peermem)"
  run rmmod nvidia_peermem || true
fi
if [ $DRY = yes ]; then echo "+ modprobe nvidia   # only if NVIDIA's P2P API is not there"
elif ! p2p_api; then run modprobe nvidia || true; fi
run modprobe ib_uverbs || true
run modprobe nvidia_peermem || true
echo "+ test -e /sys/module/nvidia_peermem/parameters/mode -a -e /sys/module/nvidia_peermem/parameters/peer_client_name   # only peermem-rs has both"
echo "+ cat /sys/module/nvidia_peermem/srcversion   # the loaded module is the file: modinfo -F srcversion"
if [ $DRY = no ]; then
  lsrc=$(cat "$M/srcversion" 2>/dev/null || true)
  if [ -e "$P/mode" ] && [ -e "$P/peer_client_name" ] && [ -n "$lsrc" ] && [ "$lsrc" != "${fsrc:-}" ]; then
    fail "the loaded nvidia_peermem (srcversion $lsrc) is not the file modprobe loads ($file, srcversion ${fsrc:-none}): an older build is loaded: rmmod nvidia_peermem; modprobe nvidia_peermem"
  elif [ -e "$P/mode" ] && [ -e "$P/peer_client_name" ]; then
    pass "the loaded nvidia_peermem is peermem-rs $(cat "$M/version" 2>/dev/null), mode=$(cat "$P/mode"), client $(cat "$P/peer_client_name"), srcversion ${lsrc:-?}"
  elif [ -e "$P/persistent_api_support" ] || [ -e "$P/peerdirect_support" ]; then
    fail "the loaded nvidia_peermem is NVIDIA's (it has parameters/persistent_api_support): rmmod nvidia_peermem, fix the module search order (depmod -a) and run again"
  elif [ -d "$M" ]; then
    fail "the loaded nvidia_peermem is not peermem-rs (its parameters: $(find "$P" -mindepth 1 -printf '%f ' 2>/dev/null))"
  else
    fail "nvidia_peermem is not loaded (dmesg names what is missing)"
  fi
fi

# The counters live in debugfs.
if [ $DRY = yes ]; then
  echo "+ mount -t debugfs none /sys/kernel/debug   # only if debugfs is not mounted"
elif ! mountpoint -q "$SYS/kernel/debug" 2> /dev/null && [ ! -e "$STATS" ]; then
  run mount -t debugfs none /sys/kernel/debug || true
fi
echo "+ cat /sys/kernel/debug/nvidia_peermem/stats"
if [ $DRY = no ]; then
  if [ -n "$(counters)" ]; then pass "the module's counters are readable ($STATS): $(counters | awk '{print "registrations " $1 ", live " $2}')"
  else fail "cannot read the module's counters ($STATS): they prove each GPU run went through peermem-rs (root? debugfs?)"; fi
fi

step "3. perftest with CUDA"
echo "+ ${PT}ib_write_bw --help | grep -- --use_cuda"
if [ $DRY = no ]; then
  # (Not `--help | grep -q`: grep leaves at the match, perftest's next
  # write gets SIGPIPE, and pipefail fails the test.)
  help=$("${PT}ib_write_bw" --help 2>&1 || true)
  if grep -q -- '--use_cuda' <<< "$help"; then
    pass "${PT}ib_write_bw has --use_cuda"
  else
    fail "${PT}ib_write_bw has no CUDA support (distribution packages are built without it: --use_cuda gives 'Unsupported memory type'); build one:"
    echo "    $PERFTEST_BUILD"
    echo "validate: stopping before the bandwidth runs: they need perftest with CUDA"
    echo "validate: $FAILS failure(s)"; exit 1
  fi
else
  note "without it (Debian/Ubuntu perftest): build perftest with CUDA:"
  echo "    $PERFTEST_BUILD"
fi

step "4. peermem-probe"
# doctor's findings are advice (exit 1: a problem found, 3: something it
# could not assess); check runs GPU memory through the HCA: it must work.
echo "+ peermem-probe doctor"
if [ $DRY = no ]; then
  rc=0; peermem-probe doctor || rc=$?
  case $rc in
    0) ;;
    3) warn "peermem-probe doctor could not assess part of this host (exit 3): see its report above";;
    *) warn "peermem-probe doctor found problems (exit $rc): see its report above";;
  esac
fi
echo "+ peermem-probe check -d $HCA -g $GPU"
if [ $DRY = no ]; then
  rc=0; peermem-probe check -d "$HCA" -g "$GPU" || rc=$?
  if [ $rc = 0 ]; then pass "peermem-probe check: GPUDirect RDMA works on $HCA, GPU $GPU"
  else fail "peermem-probe check exited $rc: GPUDirect RDMA does not work on $HCA, GPU $GPU (its verdict and causes above)"; fi
fi

step "5. bandwidth (HCA $HCA, GPU $GPU$( [ -n "$PEER" ] && echo ", servers on $PEER"))"
declare -A BW VIA
while read -r op cm sm size; do
  key=$op.$cm.$sm.$size before=''
  if [ "$cm.$sm" != host.host ]; then stats_cmd "before: registrations, live_registrations"; [ $DRY = yes ] || before=$(counters); fi
  BW[$key]=$(bw "$op" "$cm" "$sm" "$size") || true   # n/a: a FAIL in the table
  if [ "$cm.$sm" != host.host ]; then
    stats_cmd "after: registrations must have grown, live_registrations be back"
    if [ $DRY = yes ]; then VIA[$key]=yes
    elif moved "$op $size bytes, client $cm memory, server $sm memory" "$before"; then VIA[$key]=yes
    else VIA[$key]=no; fi
  fi
done < <(runs)
echo
printf '%-10s %-11s %10s %12s %12s %8s  %s\n' TEST OP SIZE "GPU GB/s" "host GB/s" GPU/HOST VERDICT
for dir in into outof; do
  read -r op cm sm <<< "$(gpu_run $dir)"
  for s in $SIZES; do
    gk=$op.$cm.$sm.$s hk=$op.host.host.$s
    g=${BW[$gk]:-n/a} h=${BW[$hk]:-n/a} r=$(ratio "${BW[$gk]:-n/a}" "${BW[$hk]:-n/a}")
    if [ $DRY = yes ]; then v="(dry run)"
    elif [ "$r" = n/a ]; then v=FAIL
    elif [ "${VIA[$gk]:-no}" = no ]; then v="FAIL (not through peermem-rs: counters)"
    elif [ "$s" -lt 65536 ]; then v="reported only (< 64 KiB)"
    elif ge "$r" "$MIN_RATIO"; then v=PASS
    elif [ $dir = outof ]; then v="WARN (read from GPU below $MIN_RATIO x host: platform limit?)"
    else v=FAIL; fi
    printf '%-10s %-11s %10s %12s %12s %8s  %s\n' "$(dir_label $dir | tr ' ' _)" "$op" "$s" "$g" "$h" "$r" "$v"
    case $v in
      FAIL) fail "$(dir_label $dir) ($op) $s bytes: GPU $g GB/s vs host $h GB/s (criterion: GPU >= $MIN_RATIO x host; n/a: the run failed)";;
      WARN*) warn "$(dir_label $dir) ($op) $s bytes: GPU/host $r; reads from GPU memory are limited on some platforms (see peermem-probe doctor: PCIe path, ACS, IOMMU)";;
    esac
  done
done

if [ $NCCL = yes ]; then
  step "6. NCCL all_reduce_perf"
  ngpu=$( [ $DRY = yes ] && echo 2 || nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ -n "$PEER" ] || [ "${ngpu:-0}" -lt 2 ]; then
    note "NCCL uses the network only between ranks that cannot reach each other otherwise: run it across two hosts, e.g."
    echo "    mpirun -np 2 -H $(uname -n),${PEER:-<peer>} -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET all_reduce_perf -b 8M -e 256M -f 2 -g 1 | grep -E 'GPU Direct RDMA|GDRDMA'"
    note "criterion: 'GPU Direct RDMA Enabled' and '/GDRDMA' in the output"
    [ $DRY = yes ] || warn "NCCL not run here (needs two local GPUs, or the command above across hosts)"
  else
    # Two local GPUs with P2P and SHM off: NCCL goes through the NIC.
    # NCCL prints "GPU Direct RDMA Enabled" and /GDRDMA for dma-buf too and
    # prefers dma-buf (NCCL 2.30 src/transport/net.cc, docs/facts/libraries.md):
    # with NCCL_DMABUF_ENABLE=0 only a peer-memory client can give GDRDMA.
    note "NCCL_DMABUF_ENABLE=0: NCCL may use only the peer-memory client, so GDRDMA proves peermem-rs serves it"
    nccl_env="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_HCA=$HCA"
    stats_cmd "before: registrations, live_registrations"
    echo "+ NCCL_DMABUF_ENABLE=0 $nccl_env all_reduce_perf -b 8M -e 256M -f 2 -g 2"
    stats_cmd "after: registrations must have grown, live_registrations be back"
    echo "+ $nccl_env all_reduce_perf -b 8M -e 8M -g 2   # NCCL's own choice, reported only"
    if [ $DRY = no ]; then
      before=$(counters)
      # shellcheck disable=SC2086 # nccl_env is a list of assignments
      out=$(env NCCL_DMABUF_ENABLE=0 $nccl_env all_reduce_perf -b 8M -e 256M -f 2 -g 2 2>&1) || fail "all_reduce_perf exited non-zero"
      moved "NCCL (NCCL_DMABUF_ENABLE=0)" "$before" || true
      grep -E 'GPU Direct RDMA|GDRDMA' <<< "$out" | head -5 || true
      # shellcheck disable=SC2086
      own=$(env $nccl_env all_reduce_perf -b 8M -e 8M -g 2 2>&1 || true)
      if grep -q 'DMA-BUF is available' <<< "$own" && grep -q '/GDRDMA' <<< "$own"; then
        note "with its defaults NCCL would take dma-buf on this host (it prefers it): peermem-rs is its fallback here"
      else
        note "with its defaults NCCL would not take dma-buf here (no 'DMA-BUF is available' line): it uses the peer-memory client"
      fi
      if grep -q 'GPU Direct RDMA Enabled' <<< "$out" && grep -q '/GDRDMA' <<< "$out"; then
        pass "NCCL (NCCL_DMABUF_ENABLE=0): GPU Direct RDMA enabled and used through the peer-memory client"
      elif grep -q 'GPU Direct RDMA Enabled' <<< "$out"; then
        fail "NCCL sees the client but no transport uses GDRDMA: the GPU-NIC path is beyond NCCL_NET_GDR_LEVEL (peermem-probe doctor shows NCCL's decision)"
      else
        fail "NCCL: no 'GPU Direct RDMA Enabled' line (it does not see a peer-memory client: /sys/module/nvidia_peermem/version?)"
      fi
    fi
  fi
fi

echo
if [ $DRY = yes ]; then echo "validate: dry run: nothing was run"; exit 0; fi
echo "validate: $FAILS failure(s), $WARNS warning(s)"
[ "$FAILS" = 0 ]
