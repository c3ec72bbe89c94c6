#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# tests/hw/validate.sh -- validate peermem-rs on a real host with an NVIDIA
# GPU and a ConnectX HCA (MLNX_OFED/DOCA-OFED), as root (`make hwtest`).
#
#   validate.sh [--dry-run] [--gpu N] [--hca mlx5_0] [--sizes "65536 1048576 8388608"]
#               [--peer HOST | --serve] [--port P] [--wait SECONDS] [--min-ratio 0.90]
#               [--perftest DIR] [--nccl]
#
# The plan and the pass criteria are printed first (README, "On the real
# hardware"); --dry-run prints them and every command, and runs none.
#   1. prerequisites (driver, HCA, tools);
#   2. identity: the nvidia_peermem that modprobe loads, and the one that is
#      loaded, is peermem-rs (module parameters mode + peer_client_name;
#      NVIDIA's has persistent_api_support + peerdirect_support);
#   3. perftest has CUDA (`ib_write_bw --help` lists --use_cuda; Debian's and
#      Ubuntu's packages do not: how to build one is printed);
#   4. peermem-probe doctor and check;
#   5. bandwidth: ib_write_bw / ib_read_bw, GPU memory (--use_cuda) and host
#      memory on the same link, each message size; criteria below;
#   6. with --nccl: NCCL all_reduce_perf and its GPU Direct RDMA lines.
# Without --peer the bandwidth runs loop back through the same HCA. With
# --peer HOST the servers run on HOST: start `make hwtest ARGS="--serve ..."`
# there (same --gpu/--hca/--sizes/--port); each client run retries until
# its server is up (--wait seconds, default 120 with --peer, 30 without).
set -euo pipefail

DRY=no GPU=0 HCA='' PEER='' SERVE=no NCCL=no PORT=18515 WAIT='' MIN_RATIO=0.90
SIZES="65536 1048576 8388608" PERFTEST=''
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
    --nccl) NCCL=yes; shift;;
    -h|--help) sed -n '3,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0;;
    *) echo "validate: unknown option $1 (see --help)" >&2; exit 2;;
  esac
done
bad_arg() { echo "validate: $*" >&2; exit 2; }
[[ $GPU =~ ^[0-9]+$ ]] || bad_arg "--gpu '$GPU': a CUDA device ordinal, 0 or more"
if ! [[ $PORT =~ ^[0-9]+$ ]] || [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65535 ]; then bad_arg "--port '$PORT': 1-65535"; fi
[ -z "$WAIT" ] || [[ $WAIT =~ ^[0-9]+$ ]] || bad_arg "--wait '$WAIT': whole seconds"
[ -n "$WAIT" ] || { WAIT=30; [ -n "$PEER" ] && WAIT=120; }
[[ $MIN_RATIO =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || bad_arg "--min-ratio '$MIN_RATIO': a fraction from 0 to 1, e.g. 0.90"
for s in $SIZES; do if ! [[ $s =~ ^[0-9]+$ ]] || [ "$s" -eq 0 ]; then bad_arg "--sizes: '$s' is not a byte count"; fi; done
[ -n "$SIZES" ] || bad_arg "--sizes: no size"
[ -z "$PEER" ] || [ $SERVE = no ] || bad_arg "--peer and --serve exclude each other (--serve runs on the peer)"
[ -z "$PERFTEST" ] || [ -x "$PERFTEST/ib_write_bw" ] || [ $DRY = yes ] || bad_arg "--perftest $PERFTEST: no executable ib_write_bw there"
PT=${PERFTEST:+$PERFTEST/}
# PEERMEM_SYSFS stands in for /sys (tests/hw/selftest.sh); the messages say /sys.
SYS=${PEERMEM_SYSFS:-/sys}

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

# The order of the bandwidth runs; the client and --serve walk the same list.
runs() {
  local op mem s
  for op in ib_write_bw ib_read_bw; do
    for mem in host gpu; do
      for s in $SIZES; do echo "$op $mem $s"; done
    done
  done
}
args_of() { # args_of MEM SIZE -- perftest arguments of one run
  local a=(-d "$HCA" -s "$2" -p "$PORT" -F --report_gbits)
  [ "$1" = gpu ] && a+=(--use_cuda="$GPU")
  echo "${a[*]}"
}

if [ -z "$HCA" ]; then
  if [ $DRY = yes ]; then HCA=mlx5_0
  else HCA=$(find "$SYS/class/infiniband" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort | head -1); fi
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
  echo "  1. prerequisites: nvidia-smi, ibv_devinfo, ${PT}ib_write_bw, ${PT}ib_read_bw, peermem-probe, modprobe, modinfo"
  echo "  2. identity: modprobe nvidia_peermem must load peermem-rs, not NVIDIA's module of the same name"
  echo "  3. perftest has CUDA: ${PT}ib_write_bw --help lists --use_cuda"
  echo "  4. peermem-probe doctor, peermem-probe check -d $HCA -g $GPU"
  echo "  5. bandwidth on $HCA, GPU $GPU, $( [ -n "$PEER" ] && echo "servers on $PEER (run there: make hwtest ARGS=\"--serve --hca <its HCA> --gpu <its GPU> --sizes '$SIZES' --port $PORT\")" || echo "loopback through $HCA"):"
  runs | sed 's/^/     /'
  [ $NCCL = yes ] && echo "  6. NCCL all_reduce_perf with NCCL_DEBUG=INFO" || echo "  6. NCCL: not run (--nccl)"
  echo
  echo "PASS CRITERIA"
  echo "  identity  /sys/module/nvidia_peermem/parameters/{mode,peer_client_name} exist (peermem-rs);"
  echo "            modinfo -F parm nvidia_peermem lists peer_client_name (what modprobe would load)"
  echo "  perftest  ${PT}ib_write_bw --help mentions --use_cuda"
  echo "  write     ib_write_bw (the NIC writes into the peer's buffer): GPU-memory bandwidth >= $MIN_RATIO x"
  echo "            host-memory bandwidth at every message size >= 64 KiB; below 64 KiB reported only"
  echo "  read      ib_read_bw (the NIC reads out of the peer's buffer): must run and report bandwidth; a GPU/host"
  echo "            ratio below $MIN_RATIO is a WARN, not a FAIL: reads from GPU memory are limited by some"
  echo "            CPUs/root complexes whatever the client does (docs/facts/field-notes.md)"
  [ $NCCL = yes ] && {
  echo "  NCCL      run with NCCL_DMABUF_ENABLE=0 (else NCCL's dma-buf path prints the same lines): the log has"
  echo "            'GPU Direct RDMA Enabled' (NCCL sees the client) and '/GDRDMA' (NCCL uses it); a second short"
  echo "            run with NCCL's defaults only reports whether NCCL would have chosen dma-buf"; }
fi

# ---------------------------------------------------------------------------
# bw OP MEM SIZE -- one perftest run; prints GB/s on stdout (or n/a).
bw() {
  local op=$1 mem=$2 size=$3 server=127.0.0.1 out gbits srv='' deadline i=0
  local -a args
  read -ra args <<< "$(args_of "$mem" "$size")"
  if [ -n "$PEER" ]; then
    server=$PEER
  else
    echo "+ ${PT}$op ${args[*]} &" >&3
    if [ $DRY = no ]; then "${PT}$op" "${args[@]}" > /dev/null 2>&1 & srv=$!; fi
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

# --serve: the server side of a peer's run, in the same order.
if [ $SERVE = yes ]; then
  step "serving $(runs | wc -l) perftest runs on $HCA (GPU $GPU), port $PORT"
  while read -r op mem size; do
    read -ra args <<< "$(args_of "$mem" "$size")"
    echo "+ ${PT}$op ${args[*]}"
    [ $DRY = yes ] && continue
    "${PT}$op" "${args[@]}" > /dev/null 2>&1 || fail "$op $mem $size (server)"
  done < <(runs)
  [ $DRY = yes ] && { echo; echo "validate: dry run: nothing was run"; exit 0; }
  echo "validate: served; $FAILS failure(s)"; [ "$FAILS" = 0 ]; exit
fi

# ---------------------------------------------------------------------------
step "1. prerequisites"
for t in nvidia-smi ibv_devinfo "${PT}ib_write_bw" "${PT}ib_read_bw" peermem-probe modprobe modinfo; do
  if [ $DRY = yes ]; then echo "+ command -v $t"; continue; fi
  command -v "$t" > /dev/null || fail "$t not found"
done
run nvidia-smi -L || true
[ -n "$HCA" ] || { fail "no RDMA device in /sys/class/infiniband"; exit 1; }
run ibv_devinfo -d "$HCA" || true

step "2. identity: is nvidia_peermem peermem-rs?"
M=$SYS/module/nvidia_peermem P=$SYS/module/nvidia_peermem/parameters
echo "+ modinfo -n nvidia_peermem; modinfo -F parm nvidia_peermem   # the file modprobe loads"
if [ $DRY = no ]; then
  file=$(modinfo -n nvidia_peermem 2>/dev/null || true)
  parms=$(modinfo -F parm nvidia_peermem 2>/dev/null || true)
  if [ -z "$file" ]; then
    fail "no nvidia_peermem module for $(uname -r): install peermem-rs-dkms (dkms status peermem-rs)"
  elif grep -q '^peer_client_name:' <<< "$parms"; then
    pass "modprobe nvidia_peermem loads peermem-rs ($file)"
  else
    fail "modprobe nvidia_peermem loads $file, which is not peermem-rs (its parameters: $(cut -d: -f1 <<< "$parms" | tr '\n' ' '));" \
      "depmod must prefer updates/dkms: check /etc/depmod.d/peermem-rs.conf, run depmod -a, dkms status peermem-rs"
  fi
fi
if [ $DRY = yes ]; then
  echo "+ rmmod nvidia_peermem   # only if a loaded nvidia_peermem is not peermem-rs (it has no parameters/peer_client_name)"
elif [ -d "$M" ] && [ ! -e "$P/peer_client_name" ]; then
  note "an nvidia_peermem that is not peermem-rs is loaded: unloading it (rmmod nvidia_peermem)"
  run rmmod nvidia_peermem || true
fi
run modprobe nvidia || true
run modprobe ib_uverbs || true
run modprobe nvidia_peermem || true
echo "+ test -e /sys/module/nvidia_peermem/parameters/mode -a -e /sys/module/nvidia_peermem/parameters/peer_client_name   # only peermem-rs has both"
if [ $DRY = no ]; then
  if [ -e "$P/mode" ] && [ -e "$P/peer_client_name" ]; then
    pass "the loaded nvidia_peermem is peermem-rs $(cat "$M/version" 2>/dev/null), mode=$(cat "$P/mode"), client $(cat "$P/peer_client_name")"
  elif [ -e "$P/persistent_api_support" ] || [ -e "$P/peerdirect_support" ]; then
    fail "the loaded nvidia_peermem is NVIDIA's (it has parameters/persistent_api_support): rmmod nvidia_peermem, fix the module search order (depmod -a) and run again"
  elif [ -d "$M" ]; then
    fail "the loaded nvidia_peermem is not peermem-rs (its parameters: $(find "$P" -mindepth 1 -printf '%f ' 2>/dev/null))"
  else
    fail "nvidia_peermem is not loaded (dmesg names what is missing)"
  fi
fi

step "3. perftest with CUDA"
echo "+ ${PT}ib_write_bw --help | grep -- --use_cuda"
if [ $DRY = no ]; then
  if "${PT}ib_write_bw" --help 2>&1 | grep -q -- '--use_cuda'; then
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
run peermem-probe doctor || true
run peermem-probe check -d "$HCA" -g "$GPU" || true

step "5. bandwidth (HCA $HCA, GPU $GPU$( [ -n "$PEER" ] && echo ", servers on $PEER"))"
declare -A BW
while read -r op mem size; do
  BW[$op.$mem.$size]=$(bw "$op" "$mem" "$size") || true   # n/a: a FAIL in the table
done < <(runs)
echo
printf '%-12s %10s %12s %12s %8s  %s\n' OP SIZE "GPU GB/s" "host GB/s" GPU/HOST VERDICT
for op in ib_write_bw ib_read_bw; do
  for s in $SIZES; do
    g=${BW[$op.gpu.$s]:-n/a} h=${BW[$op.host.$s]:-n/a} r=$(ratio "${BW[$op.gpu.$s]:-n/a}" "${BW[$op.host.$s]:-n/a}")
    if [ $DRY = yes ]; then v="(dry run)"
    elif [ "$r" = n/a ]; then v=FAIL
    elif [ "$s" -lt 65536 ]; then v="reported only (< 64 KiB)"
    elif ge "$r" "$MIN_RATIO"; then v=PASS
    elif [ $op = ib_read_bw ]; then v="WARN (read from GPU below $MIN_RATIO x host: platform limit?)"
    else v=FAIL; fi
    printf '%-12s %10s %12s %12s %8s  %s\n' "$op" "$s" "$g" "$h" "$r" "$v"
    case $v in
      FAIL) fail "$op $s bytes: GPU $g GB/s vs host $h GB/s (criterion: GPU >= $MIN_RATIO x host; n/a: the run failed)";;
      WARN*) warn "$op $s bytes: GPU/host $r; reads from GPU memory are limited on some platforms (see peermem-probe doctor: PCIe path, ACS, IOMMU)";;
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
    echo "+ NCCL_DMABUF_ENABLE=0 $nccl_env all_reduce_perf -b 8M -e 256M -f 2 -g 2"
    echo "+ $nccl_env all_reduce_perf -b 8M -e 8M -g 2   # NCCL's own choice, reported only"
    if [ $DRY = no ]; then
      # shellcheck disable=SC2086 # nccl_env is a list of assignments
      out=$(env NCCL_DMABUF_ENABLE=0 $nccl_env all_reduce_perf -b 8M -e 256M -f 2 -g 2 2>&1) || fail "all_reduce_perf exited non-zero"
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
