#!/bin/bash
# probe-no-cuda: without libcuda every GPU path of check, bench and pair
# says so and exits 2, while the host paths still run and pass.
. "${vmstage:-/peermem}/vm/lib.sh"
P=$BIN/peermem-probe
[ -x "$P" ] || { bad "$P is not staged"; finish; }
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then skip "libcuda is installed here"; fi
check "rxe0 up on dummy0" rxe_up rxe0 dummy0 192.0.2.1/24 || finish

out=$(timeout 120 "$P" check --size 256K 2>&1); r=$?
echo "$out"
check "check: exit 2 (got $r)" test "$r" = 2
check "check: CUDA unavailable headline" grep -q '^CUDA: unavailable (libcuda.so not found)' <<<"$out"
check "check: host baseline still PASS" grep -qE '^rxe0 +- +host->host +ibv_reg_mr +PASS' <<<"$out"
n=$(grep -cE '^rxe0 +- +(host->gpu|gpu->host|gpu->gpu) +(ibv_reg_mr|dma-buf) +UNTESTED' <<<"$out")
check "check: all 6 GPU paths UNTESTED (got $n)" test "$n" = 6
check "check: cause names libcuda" grep -q 'cause:  libcuda.so (the NVIDIA driver.s user-space library) is not installed' <<<"$out"

flat=$(timeout 120 "$P" --json check --size 256K 2>&1 | tr -d ' \n')
n=$(grep -o '"status":"untested","bytes":262144,"verified_bytes":0,"micros":null,"failed_step":"CUDA","error":"libcuda.sonotfound"' <<<"$flat" | wc -l)
check "JSON: 6 GPU rows untested with the libcuda error (got $n)" test "$n" = 6
check "JSON: cuda.available false" grep -q '"cuda":{"available":false' <<<"$flat"

out=$(timeout 120 "$P" check --only dmabuf --gpu 0 2>&1); r=$?
check "check --only dmabuf: exit 2 (got $r)" test "$r" = 2

out=$(timeout 300 "$P" bench --iters 5 --sizes 4K,64K --bw-size 256K --bw-iters 20 2>&1); r=$?
echo "$out"
check "bench: exit 2 (got $r)" test "$r" = 2
check "bench: host registration measured" grep -qE '^host +64 KiB +PASS +5 +[0-9.]+ +[0-9.]+' <<<"$out"
check "bench: GPU rows UNTESTED" grep -qE '^gpu +4 KiB +UNTESTED' <<<"$out"
check "bench: host->host bandwidth measured" grep -qE '^host->host +256 KiB +20 +PASS +[0-9.]+$' <<<"$out"
check "bench: gpu->gpu bandwidth UNTESTED" grep -qE '^gpu->gpu .* UNTESTED' <<<"$out"

out=$(timeout 60 "$P" pair --connect 192.0.2.1 --gpu 0 --timeout 10 2>&1); r=$?
check "pair --gpu: exit 2 (got $r)" test "$r" = 2
check "pair --gpu: says libcuda is missing" grep -q 'libcuda.so not found' <<<"$out"

out=$(timeout 120 "$P" check --host-only 2>&1); r=$?
check "check --host-only still passes: exit $r" test "$r" = 0
check "rdma link delete" rxe_down rxe0
finish
