#!/bin/bash
# probe-doctor: `peermem-probe doctor` on a VM with soft-RoCE and no GPU:
# it reads modules, memory_peers, the RDMA port (decoded state, GID with
# its netdev), /dev/infiniband, PCIe, IOMMU, kernel config and limits,
# reports that there is no NVIDIA GPU, and exits 3 (could not test).
. "${vmstage:-/peermem}/vm/lib.sh"
skip_on_debug_kernel "peermem-probe doctor (userspace, reads sysfs)"
P=$BIN/peermem-probe
[ -x "$P" ] || { bad "$P is not staged"; finish; }
check "rxe0 up on dummy0" rxe_up rxe0 dummy0 192.0.2.1/24 || finish
# The dma-buf MR row registers a udmabuf: have the driver there (built in
# on Debian's kernels; a module elsewhere).
modprobe udmabuf 2>/dev/null || true

out=$("$P" doctor 2>&1); r=$?
echo "$out"
check "doctor: exit 3 without a GPU (got $r)" test "$r" = 3
check "no NVIDIA GPU reported as UNTESTED" grep -qE '^pcie +GPU +UNTESTED +no NVIDIA GPU on the PCI bus' <<<"$out"
check "rxe0 listed as a software device" grep -qE '^pcie +RDMA rxe0 +info +software device' <<<"$out"
check "ib_uverbs seen loaded or built in" grep -qE '^modules +ib_uverbs +info +(loaded|built into the kernel)' <<<"$out"
check "kernel named" grep -q "^kernel $(uname -r)\$" <<<"$out"
check "CONFIG_RUST, IOMMU and RLIMIT_MEMLOCK judged" bash -c 'grep -q "CONFIG_RUST" <<<"$1" && grep -qE "^iommu +IOMMU" <<<"$1" && grep -q RLIMIT_MEMLOCK <<<"$1"' _ "$out"
check "rxe0 port 1 PASS: ACTIVE, LinkUp, Ethernet" grep -qE '^rdma +rxe0 port 1 +PASS +ACTIVE, LinkUp, Ethernet' <<<"$out"
check "its RoCE v2 GID on dummy0 with 192.0.2.1" grep -qE 'GID [0-9]+ 0000:0000:0000:0000:0000:ffff:c000:0201 RoCE v2 on dummy0 \(192\.0\.2\.1\)' <<<"$out"
check "rdma_cm and uverbs0 usable" bash -c 'grep -qE "^devices +rdma_cm +PASS" <<<"$1" && grep -qE "^devices +/dev/infiniband/uverbs0 +PASS +mode 0[0-7]+" <<<"$1"' _ "$out"
check "NCCL/UCX/NVSHMEM detection listed" bash -c 'grep -qE "^detection +NCCL >= 2.23.4 +info +no peer-memory client to detect" <<<"$1" && grep -qE "^detection +NVSHMEM all" <<<"$1"' _ "$out"
check "no FAIL item" bash -c '! grep -qE "^[a-z_]+ +.+ +FAIL " <<<"$1"' _ "$out"
check "verdict line: could not assess the GPU" test "$(sed -n 2p <<<"$out")" = "could not assess: pcie/GPU"
# A real ibv_reg_dmabuf_mr of a host dma-buf on rxe0: soft-RoCE takes no
# dma-buf MRs (rdma-core's rxe provider has no reg_dmabuf_mr, so libibverbs
# answers EOPNOTSUPP; a kernel-side refusal gives EOPNOTSUPP too), an info
# row without a GPU.
check "dma-buf MR on rxe0: tried, no dma-buf MRs" grep -qE '^dma-buf +MR on rxe0 +info +no dma-buf MRs \((EOPNOTSUPP|EPROTONOSUPPORT|ENOSYS|ENOTSUPP)\)$' <<<"$out"
check "... because soft RDMA has none" grep -q 'detail: ibv_reg_dmabuf_mr of a host dma-buf: soft RDMA (rxe, siw) has no dma-buf MRs' <<<"$out"
check "OFED version unknown on Debian's own RDMA stack" grep -qE '^modules +MLNX_OFED/DOCA-OFED +info +unknown$' <<<"$out"

json=$("$P" doctor --json 2>&1); r=$?
flat=$(tr -d ' \n' <<<"$json")
check "JSON: schema 2, exit_code 3 and status untested" grep -q '"schema_version":2,"command":"doctor","version":"[^"]*","status":"untested","exit_code":3' <<<"$flat"
check "JSON: the port, typed" grep -q '"rdma_device":"rxe0","pci":null,"driver":null,"numa_node":null,"ports":\[{"port":1,"state":"ACTIVE","phys_state":"LinkUp","link_layer":"Ethernet"' <<<"$flat"
check "JSON: the GPU item" grep -q '"area":"pcie","name":"GPU","status":"untested"' <<<"$flat"
check "JSON: the dma-buf MR row of rxe0" grep -qE '"area":"dma-buf","name":"MRonrxe0","status":"info","value":"nodma-bufMRs\([A-Z]+\)"' <<<"$flat"
check "JSON: verdict and unknown OFED version" bash -c 'grep -q "\"verdict\":{\"status\":\"untested\",\"exit_code\":3,\"summary\":\"couldnotassess:pcie/GPU\"" <<<"$1" && grep -q "\"rdma_stack\":{\"version\":null,\"source\":null}" <<<"$1"' _ "$flat"

# With our peer-memory client loaded (where it loads on this kernel),
# doctor sees the module.
if [ -f "$MODS/peermem_rs.ko" ] && insmod "$MODS/peermem_rs.ko" 2>/dev/null; then
  out=$("$P" doctor 2>&1)
  check "peermem_rs shown loaded" grep -qE '^modules +peermem_rs +info +loaded' <<<"$out"
  check "... and identified as peermem-rs by its parameters" grep -qE "^modules +peermem_rs +info +loaded \(peermem-rs $(cat /sys/module/peermem_rs/version), mode=" <<<"$out"
  rmmod peermem_rs
else
  ok "peermem_rs not loadable on this kernel: module row not exercised"
fi
# With the simulated peer-memory core (which exports
# ib_register_peer_memory_client) and our client registered with it, the
# kernel has an interface: doctor sees it, and each library's detection
# verdict matches the files that really exist; check's peer-memory verdict
# turns from "not available" into "not tested" (no libcuda here).
. "$CASES/sim-common.inc"
if sim_load 2>/dev/null && insmod "$MODS/peermem_rs.ko" 2>/dev/null; then
  out=$("$P" doctor 2>&1)
  echo "$out" | grep -E '^(modules|memory_peers|detection)'
  check "sim core: peer-memory interface present" grep -qE '^memory_peers +peer-memory interface +info +present' <<<"$out"
  if [ -e /sys/kernel/mm/memory_peers/nv_mem/version ]; then
    check "nv_mem registered: every library version detects it" bash -c '[ "$(grep -cE "^detection .* PASS +detects the peer-memory client" <<<"$1")" = 5 ]' _ "$out"
  else
    check "no memory_peers/nv_mem: NCCL <= 2.22 does not detect the client" grep -qE '^detection +NCCL <= 2.22 +WARN +does not detect the loaded client' <<<"$out"
  fi
  cout=$(timeout 120 "$P" check --size 64K 2>&1); r=$?
  echo "$cout" | head -12
  check "sim core: check peer memory not tested, could not test (exit $r)" bash -c '[ "$1" = 3 ] && grep -qE "^peer memory +rxe0 +not tested" <<<"$2"' _ "$r" "$cout"
  rmmod peermem_rs
  # Ours built as nvidia_peermem (the DKMS name): doctor tells it from
  # NVIDIA's module of the same name by its parameters.
  if [ -f "$MODS/nvidia_peermem.ko" ] && insmod "$MODS/nvidia_peermem.ko" 2>/dev/null; then
    out=$("$P" doctor 2>&1)
    check "nvidia_peermem.ko (ours) identified as peermem-rs, not NVIDIA's" grep -qE '^modules +nvidia_peermem +info +loaded \(peermem-rs [^,]+, mode=' <<<"$out"
    jout=$("$P" doctor --json 2>&1 | tr -d ' \n')
    check "JSON: peer_clients names nvidia_peermem, origin peermem_rs" grep -q '"peer_clients":\[{"module":"nvidia_peermem","origin":"peermem_rs"' <<<"$jout"
    rmmod nvidia_peermem
  else
    bad "nvidia_peermem.ko (ours) did not load beside the simulated core"
  fi
  sim_unload
else
  sim_unload; ok "simulators or peermem_rs not loadable on this kernel: interface rows not exercised"
fi
check "no panic or backtrace" bash -c '! grep -qiE "panick|backtrace" <<<"$1"' _ "$out$json"
check "rdma link delete" rxe_down rxe0
finish
