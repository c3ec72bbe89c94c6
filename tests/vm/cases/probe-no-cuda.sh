#!/bin/bash
# probe-no-cuda: a Debian kernel (no peer-memory interface), soft-RoCE and
# no libcuda.  check gives one verdict per mechanism: peer memory "not
# available" (no interface in the kernel), dma-buf "not available" when
# rxe0 refuses dma-buf MRs (NCCL's fd -1 probe), else "not tested" (no
# libcuda); host memory works.  bench measures host WRITE and READ over
# two QPs and leaves the GPU rows untested; pair --gpu could not test.
. "${vmstage:-/peermem}/vm/lib.sh"
skip_on_debug_kernel "peermem-probe without libcuda"
P=$BIN/peermem-probe
[ -x "$P" ] || { bad "$P is not staged"; finish; }
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then skip "libcuda is installed here"; fi
check "rxe0 up on dummy0" rxe_up rxe0 dummy0 192.0.2.1/24 || finish
grep -q ib_register_peer_memory_client /proc/kallsyms && skip "this kernel has a peer-memory interface"

out=$(timeout 120 "$P" check --size 256K 2>&1); r=$?
echo "$out"
flat=$(timeout 120 "$P" --json check --size 256K 2>/dev/null | tr -d ' \n')
check "CUDA unavailable headline" grep -q '^CUDA: unavailable (libcuda.so not found)' <<<"$out"
check "host memory works on rxe0" grep -qE '^host memory +rxe0 +works' <<<"$out"
check "peer memory: not available, the kernel has no interface" grep -qE '^peer memory +rxe0 +not available' <<<"$out"
check "peer memory cause names the kernel" grep -q "cause:  kernel $(uname -r) has no peer-memory interface" <<<"$out"
if grep -q '"name":"rxe0","port":{[^}]*},"dma_buf_mr_supported":false' <<<"$flat"; then
  check "rxe0 refuses dma-buf MRs: headline says so" grep -q '^RDMA rxe0: .*, dma-buf MRs not supported$' <<<"$out"
  check "dma-buf: not available on rxe0" grep -qE '^dma-buf +rxe0 +not available' <<<"$out"
  check "dma-buf cause names rxe0" grep -q 'cause:  RDMA device rxe0 does not support dma-buf memory regions' <<<"$out"
  check "no GPU mechanism available: does not work, exit 1 (got $r)" test "$r" = 1
  check "verdict sentence" grep -q '^peermem-probe check: GPUDirect RDMA does not work: neither peer memory nor dma-buf is available on this host (exit 1)$' <<<"$out"
else
  check "rxe0 takes dma-buf MRs: headline says so" grep -q '^RDMA rxe0: .*, dma-buf MRs supported$' <<<"$out"
  check "dma-buf: not tested without libcuda" grep -qE '^dma-buf +rxe0 +not tested' <<<"$out"
  check "could not test, exit 3 (got $r)" test "$r" = 3
  check "verdict sentence" grep -q '^peermem-probe check: could not test GPUDirect RDMA: libcuda.so (the NVIDIA driver.s user-space library) is not installed (exit 3)$' <<<"$out"
fi
check "JSON: schema 2, verdict.works false" grep -q '"schema_version":2,.*"verdict":{"works":false,"via":\[\]' <<<"$flat"
check "JSON: peer memory not_available" grep -q '"mechanism":"peer_memory","rdma_device":"rxe0","verdict":"not_available"' <<<"$flat"

out=$(timeout 120 "$P" check --only dmabuf --gpu 0 2>&1); r=$?
check "check --only dmabuf: exit 1 or 3, never 0 or 2 (got $r)" bash -c '[ "$1" = 1 ] || [ "$1" = 3 ]' _ "$r"
check "check --only dmabuf: no peer-memory rows" bash -c '! grep -qE "^rxe0 .*peer memory" <<<"$1"' _ "$out"

out=$(timeout 300 "$P" bench --iters 5 --sizes 4K,64K --bw-sizes 4K,64K --bw-iters 20 --qps 2 2>&1); r=$?
echo "$out"
check "bench: exit 3, GPU rows untested (got $r)" test "$r" = 3
check "bench: host registration measured" grep -qE '^host +ibv_reg_mr +64 KiB +PASS +5 +[0-9.]+ +[0-9.]+' <<<"$out"
check "bench: GPU rows UNTESTED" grep -qE '^gpu +ibv_reg_mr +4 KiB +UNTESTED' <<<"$out"
for op in write read; do
  check "bench: host->host $op 64 KiB over 2 QPs measured" grep -qE "^host->host +$op +64 KiB +2 +20 +PASS +[0-9.]+ +[0-9.]+ +[0-9.]+ +-$" <<<"$out"
  check "bench: gpu->gpu $op UNTESTED" grep -qE "^gpu->gpu +$op +4 KiB .* UNTESTED" <<<"$out"
done

out=$(timeout 60 "$P" pair --connect 192.0.2.1 --gpu 0 --timeout 10 2>&1); r=$?
check "pair --gpu: exit 3 (got $r)" test "$r" = 3
check "pair --gpu: says libcuda is missing" grep -q 'libcuda.so not found' <<<"$out"

out=$(timeout 120 "$P" check --host-only 2>&1); r=$?
check "check --host-only still passes: exit $r" test "$r" = 0
check "rdma link delete" rxe_down rxe0
finish
