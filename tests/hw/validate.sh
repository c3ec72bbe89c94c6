#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# tests/hw/validate.sh -- validate peermem-rs on a real host with an NVIDIA
# GPU and a ConnectX HCA (MLNX_OFED/DOCA-OFED), as root (`make hwtest`):
#   1. prerequisites (driver, HCA, tools);
#   2. load: modprobe nvidia_peermem (the DKMS build), its version file;
#   3. peermem-probe doctor and check;
#   4. bandwidth with perftest: ib_write_bw writes into, ib_read_bw reads
#      from, GPU memory (--use_cuda) and host memory (the reference), in GB/s,
#      and the GPU/host ratio (low read ratios point at PCIe topology, ACS or
#      the IOMMU: see peermem-probe doctor);
#   5. optionally (--nccl) NCCL all_reduce_perf and its "GPU Direct RDMA" line.
# Without --peer the bandwidth runs loop back through the same HCA.
#   validate.sh [--dry-run] [--gpu N] [--hca mlx5_0] [--peer HOST] [--size BYTES] [--nccl]
# --dry-run prints every command it would run ("+ cmd") and runs none.
set -euo pipefail

DRY=no GPU=0 HCA='' PEER='' SIZE=1048576 NCCL=no
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=yes; shift;;
    --gpu) GPU=$2; shift 2;;
    --hca) HCA=$2; shift 2;;
    --peer) PEER=$2; shift 2;;
    --size) SIZE=$2; shift 2;;
    --nccl) NCCL=yes; shift;;
    -h|--help) sed -n '3,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0;;
    *) echo "validate: unknown option $1 (see --help)" >&2; exit 2;;
  esac
done

FAILS=0
step() { echo "== $*"; }
note() { echo "# $*"; }
# run CMD... -- print it; run it unless --dry-run; a failure is counted.
run() {
  echo "+ $*"
  [ $DRY = yes ] && return 0
  "$@" || { echo "validate: FAILED: $*"; FAILS=$((FAILS + 1)); return 1; }
}
# out CMD... -- like run, and keep the output in $OUT.
OUT=
out() {
  echo "+ $*"
  OUT=
  [ $DRY = yes ] && return 0
  OUT=$("$@" 2>&1) || { echo "$OUT"; echo "validate: FAILED: $*"; FAILS=$((FAILS + 1)); return 1; }
  echo "$OUT"
}

step "1. prerequisites"
for t in nvidia-smi ib_write_bw ib_read_bw ibv_devinfo peermem-probe modprobe; do
  if [ $DRY = yes ]; then echo "+ command -v $t"; continue; fi
  command -v "$t" > /dev/null || { echo "validate: FAILED: $t not found"; FAILS=$((FAILS + 1)); }
done
run nvidia-smi -L || true
if [ -z "$HCA" ]; then
  if [ $DRY = yes ]; then HCA=mlx5_0; note "no --hca: the first device of /sys/class/infiniband (here: $HCA)"
  else HCA=$(find /sys/class/infiniband -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort | head -1); fi
fi
[ -n "$HCA" ] || { echo "validate: FAILED: no RDMA device in /sys/class/infiniband"; exit 1; }
run ibv_devinfo -d "$HCA" || true

step "2. load the module"
run modprobe nvidia || true
run modprobe ib_uverbs || true
run modprobe nvidia_peermem || true
run modinfo -n nvidia_peermem || true
run cat /sys/module/nvidia_peermem/version || true

step "3. peermem-probe"
run peermem-probe doctor || true
run peermem-probe check || true

# bw OP MEM -- one perftest run (server + client); prints GB/s (or n/a).
bw() {
  local op=$1 mem=$2 cuda=() server=127.0.0.1 gbits
  [ "$mem" = gpu ] && cuda=(--use_cuda="$GPU")
  local args=(-d "$HCA" -s "$SIZE" -F --report_gbits "${cuda[@]}")
  if [ -n "$PEER" ]; then
    note "on $PEER, start: $op ${args[*]}" >&2; server=$PEER
  else
    echo "+ $op ${args[*]} &" >&2
    [ $DRY = yes ] || { "$op" "${args[@]}" > /dev/null 2>&1 & sleep 2; }
  fi
  echo "+ $op ${args[*]} $server" >&2
  if [ $DRY = yes ]; then echo n/a; return; fi
  gbits=$("$op" "${args[@]}" "$server" 2>&1 | awk -v s="$SIZE" '$1 == s && NF >= 4 {print $4}' | tail -1)
  wait || true
  if [ -z "$gbits" ]; then echo "validate: FAILED: $op ($mem memory) reported no bandwidth" >&2; echo n/a; return 1; fi
  echo "$gbits" | awk '{printf "%.2f\n", $1 / 8}'
}
ratio() { if [ "$1" = n/a ] || [ "$2" = n/a ]; then echo n/a; else awk -v g="$1" -v h="$2" 'BEGIN {printf "%.2f", (h > 0 ? g / h : 0)}'; fi; }

step "4. bandwidth ($SIZE-byte messages, HCA $HCA, GPU $GPU)"
for op in ib_write_bw ib_read_bw; do
  h=$(bw "$op" host) || FAILS=$((FAILS + 1))
  g=$(bw "$op" gpu) || FAILS=$((FAILS + 1))
  what="writes into"; [ $op = ib_read_bw ] && what="reads from"
  echo "validate: $op: NIC $what GPU memory $g GB/s, host memory $h GB/s, GPU/host $(ratio "$g" "$h")"
done

if [ $NCCL = yes ]; then
  step "5. NCCL all_reduce_perf"
  out env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET all_reduce_perf -b 8M -e 256M -f 2 -g 1 || true
  if [ $DRY = no ]; then
    line=$(grep -m1 -E 'GPU Direct RDMA|GDR' <<< "$OUT" || true)
    echo "validate: NCCL: ${line:-no GPU Direct RDMA line (GDR not used)}"
    [ -n "$line" ] && ! grep -q Disabled <<< "$line" || FAILS=$((FAILS + 1))
  fi
else
  note "NCCL: skipped (--nccl runs all_reduce_perf and reports its GPU Direct RDMA line)"
fi

if [ $DRY = yes ]; then echo "validate: dry run: nothing was run"; exit 0; fi
echo "validate: $FAILS failure(s)"
[ "$FAILS" = 0 ]
