#!/bin/bash
# probe-check-host: `peermem-probe check --host-only` over soft-RoCE: a
# loopback RC pair on rxe0 RDMA-writes host memory and every byte is
# compared; the table and the JSON both say PASS, and a bad device name is
# one readable line with exit 2.
. "${vmstage:-/peermem}/vm/lib.sh"
P=$BIN/peermem-probe
[ -x "$P" ] || { bad "$P is not staged"; finish; }
check "rxe0 up on dummy0" rxe_up rxe0 dummy0 192.0.2.1/24 || finish

out=$(timeout 120 "$P" check --host-only --size 1M 2>&1); r=$?
echo "$out"
check "check --host-only: exit 0 (got $r)" test "$r" = 0
check "table: rxe0 host->host PASS, 1 MiB verified" grep -qE '^rxe0 +- +host->host +ibv_reg_mr +PASS +1 MiB' <<<"$out"
check "table: port 1 Ethernet with a GID" grep -qE '^RDMA rxe0: port 1 Ethernet, GID [0-9]+ 0000:0000:0000:0000:0000:ffff:c000:0201' <<<"$out"

json=$(timeout 120 "$P" --json check --host-only --size 4M -d rxe0 2>&1); r=$?
flat=$(tr -d ' \n' <<<"$json")
check "JSON: exit 0 (got $r)" test "$r" = 0
check 'JSON: status pass, exit_code 0' grep -q '"command":"check","version":"[^"]*","status":"pass","exit_code":0,"host_only":true,"size":4194304' <<<"$flat"
check "JSON: 4 MiB written and verified" grep -q '"path":"host->host","registration":"ibv_reg_mr","status":"pass","bytes":4194304,"verified_bytes":4194304' <<<"$flat"
check "JSON: RoCE v2 GID of 192.0.2.1 chosen" grep -qE '"name":"rxe0","port":\{"port":1,"link_layer":"Ethernet","gid_index":[0-9]+,"gid":"0000:0000:0000:0000:0000:ffff:c000:0201"' <<<"$flat"
check "JSON: no failure rows" bash -c '! grep -q "\"status\":\"fail\"" <<<"$1"' _ "$flat"

out=$("$P" check --host-only -d nosuchdev 2>&1); r=$?
check "unknown device: exit 2 (got $r)" test "$r" = 2
check "unknown device: says so" grep -q 'no such RDMA device' <<<"$out"
check "no panic or backtrace anywhere" bash -c '! grep -qiE "panick|backtrace|RUST_BACKTRACE" <<<"$1"' _ "$out$json"
check "rdma link delete" rxe_down rxe0
finish
