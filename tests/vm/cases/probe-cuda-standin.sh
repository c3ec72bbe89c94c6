#!/bin/bash
# probe-cuda-standin: peermem-probe's CUDA code against the bench's libcuda
# stand-in (tests/cuda-standin: one GPU whose memory is a udmabuf mapping,
# VM_PFNMAP like a GPU BAR, so get_user_pages cannot pin it), on a Debian
# kernel (no peer-memory interface) over soft-RoCE (no dma-buf MRs).
# check finds the GPU through the driver API and gives both GPU mechanisms
# "not available" for those two reasons (exit 1); bench allocates GPU memory
# (cuMemAlloc and cuMemCreate), and ibv_reg_mr on it fails with EFAULT, the
# kernel's answer for device memory without a peer-memory client, and
# ibv_reg_dmabuf_mr of its dma-buf export fails with EOPNOTSUPP on rxe.
. "${vmstage:-/peermem}/vm/lib.sh"
skip_on_debug_kernel "peermem-probe with the libcuda stand-in"
P=$BIN/peermem-probe
[ -x "$P" ] || { bad "$P is not staged"; finish; }
grep -q ib_register_peer_memory_client /proc/kallsyms && skip "this kernel has a peer-memory interface"
check "/dev/udmabuf exists (CONFIG_UDMABUF)" test -c /dev/udmabuf || finish
L=/tmp/cuda-standin
check "build the libcuda stand-in" bash "$PEERMEM/src/$(uname -r)/tests/cuda-standin/build.sh" "$L" || finish
export LD_LIBRARY_PATH=$L
check "rxe0 up on dummy0" rxe_up rxe0 dummy0 192.0.2.1/24 || finish
kernel=$(uname -r)

# check: the GPU is found; each GPU mechanism is not available, for its reason.
out=$(timeout 180 "$P" check --size 256K 2>&1); r=$?
echo "$out"
flat=$(timeout 180 "$P" --json check --size 256K 2>/dev/null | tr -d ' \n')
check "check: CUDA driver API 12.4 (the stand-in)" grep -q '^CUDA: driver API 12\.4' <<<"$out"
check "check: GPU 0 listed with its capabilities" \
  grep -qE '^GPU 0: peermem-rs bench GPU stand-in at [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]: GPUDirect RDMA yes, on cuMemCreate memory yes, dma-buf yes, flush options \[host\], writes ordering owner$' <<<"$out"
check "check JSON: GPU 0 is a discrete GPU (CU_DEVICE_ATTRIBUTE_INTEGRATED and ..._USES_HOST_PAGE_TABLES 0)" \
  grep -q '"integrated":false,"host_page_tables":false,"platform":"discrete"' <<<"$flat"
plat=$(grep -cE '^GPU 0: (Tegra integrated GPU|integrated GPU, unified memory|CPU-coherent GPU)' <<<"$out")
check "check: no platform line for a discrete GPU" test "$plat" = 0
check "check: host memory works on rxe0" grep -qE '^host memory +rxe0 +works' <<<"$out"
check "check: peer memory not available on rxe0" grep -qE '^peer memory +rxe0 +not available' <<<"$out"
check "check: ... because kernel $kernel has no peer-memory interface" grep -q "cause:  kernel $kernel has no peer-memory interface" <<<"$out"
check "check: dma-buf not available on rxe0" grep -qE '^dma-buf +rxe0 +not available' <<<"$out"
check "check: ... because rxe0 has no dma-buf MRs" grep -q 'cause:  RDMA device rxe0 .*does not support dma-buf memory regions' <<<"$out"
check "check: exit 1 (got $r)" test "$r" = 1
check "check: verdict" grep -q '^peermem-probe check: GPUDirect RDMA does not work: neither peer memory nor dma-buf is available on this host (exit 1)$' <<<"$out"
check "check JSON: CUDA available, the stand-in GPU" grep -q '"cuda":{"available":true,"driver_version":"12.4"' <<<"$flat"
check "check JSON: GPU 0 supports dma-buf" grep -qE '"gpus":\[\{"ordinal":0,"name":"peermem-rsbenchGPUstand-in","pci_bus_id":"[0-9a-f:.]+","dma_buf_supported":true' <<<"$flat"
check "check JSON: peer memory and dma-buf not_available on rxe0" bash -c \
  'grep -q "\"mechanism\":\"peer_memory\",\"rdma_device\":\"rxe0\",\"verdict\":\"not_available\"" <<<"$1" &&
   grep -q "\"mechanism\":\"dma_buf\",\"rdma_device\":\"rxe0\",\"verdict\":\"not_available\"" <<<"$1"' _ "$flat"

# bench: GPU memory is allocated; registering it is refused by the kernel.
B="--iters 3 --sizes 64K --bw-sizes 64K --bw-iters 10"
log_mark bench
# shellcheck disable=SC2086 # B is a list of options
out=$(timeout 300 "$P" bench $B 2>&1); r=$?
echo "$out"
check "bench: GPU 0 opened (the stand-in)" grep -q 'GPU 0 (peermem-rs bench GPU stand-in' <<<"$out"
check "bench: host registration measured" grep -qE '^host +ibv_reg_mr +64 KiB +PASS +3 ' <<<"$out"
check "bench: GPU ibv_reg_mr FAIL (not untested)" grep -qE '^gpu +ibv_reg_mr +64 KiB +FAIL' <<<"$out"
check "bench: ... with EFAULT: the kernel cannot pin device memory" grep -qE 'ibv_reg_mr.*(EFAULT|Bad address)' <<<"$out"
check "bench: ... because this kernel has no peer-memory interface" grep -q 'this kernel has no peer-memory interface' <<<"$out"
check "bench: gpu->gpu write FAIL (its buffers could not be registered)" grep -qE '^gpu->gpu +write +64 KiB .*FAIL' <<<"$out"
check "bench: exit 1 (got $r)" test "$r" = 1
check "bench: the kernel refused to pin it (rxe_reg_user_mr: -14, EFAULT)" grep -q 'rxe_reg_user_mr: returned err = -14' <(log_since bench)
# shellcheck disable=SC2086
out=$(timeout 300 "$P" bench $B --alloc cumemcreate 2>&1); r=$?
echo "$out"
check "bench --alloc cumemcreate: cuMemCreate memory allocated" grep -q '^RDMA device rxe0, GPU 0 (peermem-rs bench GPU stand-in, .*) (cuMemCreate memory)$' <<<"$out"
check "bench --alloc cumemcreate: GPU ibv_reg_mr FAIL with EFAULT" \
  bash -c 'grep -qE "^gpu +ibv_reg_mr +64 KiB +FAIL" <<<"$1" && grep -qE "ibv_reg_mr.*(EFAULT|Bad address)" <<<"$1"' _ "$out"
check "bench --alloc cumemcreate: exit 1 (got $r)" test "$r" = 1
# shellcheck disable=SC2086
out=$(timeout 300 "$P" --verbose bench $B --dmabuf 2>&1); r=$?
echo "$out"
check "bench --dmabuf: the export asks for the PCIe mapping, then (a 12.4 driver) the default" \
  grep -q 'dma-buf export with the PCIe mapping flag: cuMemGetHandleForAddressRange failed: CUDA_ERROR_INVALID_VALUE (1); retrying without' <<<"$out"
check "bench --dmabuf: GPU dma-buf registration FAIL (the export worked)" grep -qE '^gpu +dma-buf +64 KiB +FAIL' <<<"$out"
check "bench --dmabuf: ... rxe0 has no dma-buf MR support (EOPNOTSUPP)" grep -q 'no dma-buf MR support' <<<"$out"
check "bench --dmabuf: exit 1 (got $r)" test "$r" = 1
check "rdma link delete" rxe_down rxe0
finish
