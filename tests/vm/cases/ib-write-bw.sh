#!/bin/bash
# ib-write-bw: perftest's ib_write_bw in loopback over soft-RoCE, through
# the RDMA CM (-R) as applications connect: the bench checks itself with the
# tool that GPUDirect RDMA is validated with on real hosts.
. "${vmstage:-/peermem}/vm/lib.sh"
skip_on_debug_kernel "perftest over soft-RoCE (no GPU path uses rxe on this kernel)"
check "rxe0 up" rxe_up rxe0 dummy0 192.0.2.1/24 || finish
n=500
timeout 240 ib_write_bw -d rxe0 -R -s 65536 -n $n --report_gbits > /tmp/bw_srv 2>&1 & srv=$!
check "the server's RDMA CM id listens" cm_listening $srv
client_of $srv timeout 240 ib_write_bw -d rxe0 -R -s 65536 -n $n --report_gbits 192.0.2.1 > /tmp/bw_cli 2>&1 ||
  kill $srv 2>/dev/null
wait
line=$(grep -E "^ *65536 +$n " /tmp/bw_cli)
check "ib_write_bw -R 64 KiB x $n completed: $line" test -n "$line" || cat /tmp/bw_cli /tmp/bw_srv
check "rdma link delete" rxe_down rxe0
finish
