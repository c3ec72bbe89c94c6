#!/bin/bash
# probe-doctor: `peermem-probe doctor` on a VM with soft-RoCE and no GPU:
# it reads modules, memory_peers, PCIe, IOMMU, kernel config and limits,
# reports that there is no NVIDIA GPU, and exits 2 (nothing to assess).
. "${vmstage:-/peermem}/vm/lib.sh"
P=$BIN/peermem-probe
[ -x "$P" ] || { bad "$P is not staged"; finish; }
check "rxe0 up on dummy0" rxe_up rxe0 dummy0 192.0.2.1/24 || finish

out=$("$P" doctor 2>&1); r=$?
echo "$out"
check "doctor: exit 2 without a GPU (got $r)" test "$r" = 2
check "no NVIDIA GPU reported as UNTESTED" grep -qE '^pcie +GPU +UNTESTED +no NVIDIA GPU on the PCI bus' <<<"$out"
check "rxe0 listed as a software device" grep -qE '^pcie +RDMA rxe0 +info +software device' <<<"$out"
check "ib_uverbs seen loaded or built in" grep -qE '^modules +ib_uverbs +info +(loaded|built into the kernel)' <<<"$out"
check "kernel named" grep -q "^kernel $(uname -r)\$" <<<"$out"
check "CONFIG_RUST, IOMMU and RLIMIT_MEMLOCK judged" bash -c 'grep -q "CONFIG_RUST" <<<"$1" && grep -qE "^iommu +IOMMU" <<<"$1" && grep -q RLIMIT_MEMLOCK <<<"$1"' _ "$out"
check "no FAIL item" bash -c '! grep -qE "^[a-z_]+ +.+ +FAIL " <<<"$1"' _ "$out"

json=$("$P" doctor --json 2>&1); r=$?
flat=$(tr -d ' \n' <<<"$json")
check "JSON: exit_code 2 and status untested" grep -q '"command":"doctor","version":"[^"]*","status":"untested","exit_code":2' <<<"$flat"
check "JSON: the GPU item" grep -q '"area":"pcie","name":"GPU","status":"untested"' <<<"$flat"

# With our peer-memory client loaded (where it loads on this kernel),
# doctor sees the module.
if [ -f "$MODS/peermem_rs.ko" ] && insmod "$MODS/peermem_rs.ko" 2>/dev/null; then
  out=$("$P" doctor 2>&1)
  check "peermem_rs shown loaded" grep -qE '^modules +peermem_rs +info +loaded' <<<"$out"
  rmmod peermem_rs
else
  ok "peermem_rs not loadable on this kernel: module row not exercised"
fi
check "no panic or backtrace" bash -c '! grep -qiE "panick|backtrace" <<<"$1"' _ "$out$json"
check "rdma link delete" rxe_down rxe0
finish
