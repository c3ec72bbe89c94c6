#!/bin/bash
# rxe: the bench's own RDMA device works: soft-RoCE (rdma_rxe) on a dummy
# netdev, an IPv4 RoCE v2 GID, an active port, and a short RC ping-pong.
. "${vmstage:-/peermem}/vm/lib.sh"
skip_on_debug_kernel "soft-RoCE self-check of the bench (no GPU path uses rxe on this kernel)"
check "rxe0 up on dummy0 with an IPv4 RoCE v2 GID" rxe_up rxe0 dummy0 192.0.2.1/24 || finish
ok "GID index $RXE_GID"
ibv_devinfo -d rxe0 > /tmp/devinfo 2>&1
check "ibv_devinfo: port active" grep -q PORT_ACTIVE /tmp/devinfo
timeout 60 ibv_rc_pingpong -d rxe0 -g "$RXE_GID" -n 100 > /tmp/pp_srv 2>&1 & srv=$!
client_of $srv timeout 60 ibv_rc_pingpong -d rxe0 -g "$RXE_GID" -n 100 127.0.0.1 > /tmp/pp_cli 2>&1 ||
  kill $srv 2>/dev/null
wait
check "ibv_rc_pingpong 100 iterations: $(grep 'iters in' /tmp/pp_cli)" grep -q '100 iters in' /tmp/pp_cli ||
  cat /tmp/pp_cli /tmp/pp_srv
check "rdma link delete" rxe_down rxe0
finish
