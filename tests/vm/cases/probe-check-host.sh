#!/bin/bash
# probe-check-host: `peermem-probe check --host-only` over soft-RoCE: a
# fresh loopback RC pair on rxe0 RDMA-writes host memory, flushes it and
# every byte is compared; the verdict is "RDMA works with host memory"
# (exit 0) in the table and the JSON.  A port taken down is a FAIL
# (exit 1) whose remedy names the real netdev, and doctor shows the port
# DOWN; a bad device name is "could not test" (exit 3).
. "${vmstage:-/peermem}/vm/lib.sh"
skip_on_debug_kernel "peermem-probe check over soft-RoCE"
P=$BIN/peermem-probe
[ -x "$P" ] || { bad "$P is not staged"; finish; }
check "rxe0 up on dummy0" rxe_up rxe0 dummy0 192.0.2.1/24 || finish

out=$(timeout 120 "$P" check --host-only --size 1M 2>&1); r=$?
echo "$out"
check "check --host-only: exit 0 (got $r)" test "$r" = 0
check "verdict: RDMA works with host memory on rxe0" grep -q '^peermem-probe check: RDMA works with host memory on rxe0 (GPU memory not tested: --host-only) (exit 0)$' <<<"$out"
check "mechanism table: host memory on rxe0 works" grep -qE '^host memory +rxe0 +works +1/1 passed' <<<"$out"
check "row: rxe0 host->host PASS, 1 MiB verified" grep -qE '^rxe0 +- +host +host->host +host memory +PASS +1 MiB' <<<"$out"
check "port 1 Ethernet with the IPv4 GID, dma-buf MR support stated" grep -qE '^RDMA rxe0: port 1 Ethernet, GID [0-9]+ 0000:0000:0000:0000:0000:ffff:c000:0201, dma-buf MRs (not )?supported$' <<<"$out"

json=$(timeout 120 "$P" --json check --host-only --size 4M -d rxe0 2>&1); r=$?
flat=$(tr -d ' \n' <<<"$json")
check "JSON: exit 0 (got $r)" test "$r" = 0
check 'JSON: schema_version 2, status pass, exit_code 0' grep -q '"schema_version":2,"command":"check","version":"[^"]*","status":"pass","exit_code":0,"verdict":{"works":true,"via":\[\],"exit_code":0' <<<"$flat"
check "JSON: host mechanism works on rxe0" grep -q '"mechanisms":\[{"mechanism":"host","rdma_device":"rxe0","verdict":"works","passed":1,"rows":1' <<<"$flat"
check "JSON: 4 MiB written, flushed and verified" grep -q '"rdma_device":"rxe0","gpu":null,"mechanism":"host","allocation":null,"path":"host->host","status":"pass","bytes":4194304,"verified_bytes":4194304' <<<"$flat"
check "JSON: RoCE v2 GID of 192.0.2.1 chosen" grep -qE '"name":"rxe0","port":\{"port":1,"link_layer":"Ethernet","gid_index":[0-9]+,"gid":"0000:0000:0000:0000:0000:ffff:c000:0201"' <<<"$flat"
check "JSON: no failure rows, no \"-\" placeholders" bash -c '! grep -qE "\"status\":\"fail\"|\":\"-\"" <<<"$1"' _ "$flat"

out=$(timeout 60 "$P" --verbose check --host-only --size 64K 2>&1 >/dev/null); r=$?
check "--verbose: a trace on stderr (fresh QP pair, RDMA WRITE, READ flush)" bash -c 'grep -q "fresh QP pair" <<<"$1" && grep -q "RDMA WRITE 1 x 65536" <<<"$1" && grep -q "RDMA READ 1 x 4" <<<"$1"' _ "$out"

# A path that fails (wrong rkey, a test hook) shows its decoded completion
# status and vendor_err, and the next path, on a fresh QP pair, passes.
out=$(timeout 60 "$P" check --host-only --size 64K --inject-bad-rkey 2>&1); r=$?
echo "$out"
check "bad rkey: exit 1 (got $r)" test "$r" = 1
check "bad rkey: first row FAIL with a decoded status and vendor_err" grep -qE 'error:  rdma write: work request [0-9]+ completed with IBV_WC_[A-Z_]+_ERR \([a-z ]+\) \(vendor_err 0x[0-9a-f]+\)' <<<"$out"
rows=$(grep -E '^rxe0 +- +host +host->host' <<<"$out" | awk '{print $7}' | tr '\n' ' ')
check "bad rkey: FAIL then PASS, the failed QP did not poison the next path (got: $rows)" test "$rows" = "FAIL PASS "
json=$(timeout 60 "$P" --json check --host-only --size 64K --inject-bad-rkey 2>&1 | tr -d ' \n')
check "bad rkey: JSON wc_status and vendor_err are values" grep -qE '"wc_status":"IBV_WC_[A-Z_]+\([a-z]+\)","vendor_err":[0-9]+' <<<"$json"

out=$("$P" check --host-only -d nosuchdev 2>&1); r=$?
check "unknown device: exit 3, could not test (got $r)" test "$r" = 3
check "unknown device: says so and lists the real ones" grep -q 'no such RDMA device (there are: rxe0)' <<<"$out"

# The port goes down with its netdev: check fails (exit 1), doctor shows it.
ip link set dummy0 down
for i in $(seq 50); do grep -q DOWN /sys/class/infiniband/rxe0/ports/1/state && break; sleep 0.1; done
out=$(timeout 60 "$P" check --host-only --size 64K 2>&1); r=$?
echo "$out"
check "port down: check exit 1 (got $r)" test "$r" = 1
check "port down: host memory FAILS on rxe0" grep -qE '^host memory +rxe0 +FAILS' <<<"$out"
check "port down: remedy names dummy0" grep -q 'ip link set dummy0 up' <<<"$out"
dout=$("$P" doctor 2>&1)
check "port down: doctor row FAIL with the decoded state" grep -qE '^rdma +rxe0 port 1 +FAIL +DOWN, Disabled, Ethernet' <<<"$dout" || grep rxe0 <<<"$dout"
ip link set dummy0 up
for i in $(seq 100); do grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state && break; sleep 0.1; done
out=$(timeout 60 "$P" check --host-only --size 64K 2>&1); r=$?
check "port up again: the next check passes (exit $r)" test "$r" = 0

check "no panic or backtrace anywhere" bash -c '! grep -qiE "panick|backtrace|RUST_BACKTRACE|internal error" <<<"$1"' _ "$out$json$dout"
check "rdma link delete" rxe_down rxe0
finish
