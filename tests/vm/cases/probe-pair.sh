#!/bin/bash
# probe-pair: `peermem-probe pair` between two network namespaces, each
# with its own soft-RoCE device on one end of a veth pair: the client
# writes into the server's buffer over the RDMA CM, the server checks it
# and writes back, and both sides report both directions verified.
. "${vmstage:-/peermem}/vm/lib.sh"
skip_on_debug_kernel "peermem-probe pair between two hosts"
P=$BIN/peermem-probe
[ -x "$P" ] || { bad "$P is not staged"; finish; }
modprobe rdma_rxe && modprobe ib_uverbs && modprobe rdma_ucm && modprobe veth || { bad "modules"; finish; }
A=pmA; B=pmB; IPA=198.51.100.1; IPB=198.51.100.2
cleanup() {
  ip netns exec $A rdma link delete rxeA 2>/dev/null; ip netns exec $B rdma link delete rxeB 2>/dev/null
  ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null
}
trap cleanup EXIT
ip netns add $A && ip netns add $B || { bad "ip netns add"; finish; }
ip link add vA type veth peer name vB && ip link set vA netns $A && ip link set vB netns $B || { bad "veth"; finish; }
ip -n $A addr add $IPA/24 dev vA && ip -n $A link set vA up && ip -n $A link set lo up
ip -n $B addr add $IPB/24 dev vB && ip -n $B link set vB up && ip -n $B link set lo up
check "rxeA on vA inside $A" ip netns exec $A rdma link add rxeA type rxe netdev vA || finish
check "rxeB on vB inside $B" ip netns exec $B rdma link add rxeB type rxe netdev vB || finish
gid_up() { # gid_up DEV IP-HEX-SUFFIX: wait for the IPv4 RoCE v2 GID
  local i g
  for i in $(seq 200); do
    for g in /sys/class/infiniband/$1/ports/1/gids/*; do
      case $(cat "$g" 2>/dev/null) in *"$2") return 0;; esac
    done
    sleep 0.05
  done
  return 1
}
check "rxeA has the GID of $IPA" gid_up rxeA c633:6401 || finish
check "rxeB has the GID of $IPB" gid_up rxeB c633:6402 || finish
# rxe serves RoCE only in namespaces on kernels whose rdma_rxe has
# per-namespace UDP sockets; on older ones no RC traffic crosses namespaces.
# Ask rdma-core's own ibv_rc_pingpong first, so a failure below is ours.
gidx() { local g; for g in /sys/class/infiniband/$1/ports/1/gids/*; do
  case $(cat "$g") in *"$2") echo "${g##*/}"; return;; esac; done; }
ip netns exec $A timeout 20 ibv_rc_pingpong -d rxeA -g "$(gidx rxeA c633:6401)" -n 5 > /tmp/pp-srv.out 2>&1 & pp=$!
if ! client_of $pp ip netns exec $B timeout 15 ibv_rc_pingpong -d rxeB -g "$(gidx rxeB c633:6402)" -n 5 $IPA > /tmp/pp-cli.out 2>&1; then
  kill $pp 2>/dev/null; wait
  skip "rdma_rxe of $(uname -r) carries no RC traffic between network namespaces (ibv_rc_pingpong fails too)"
fi
wait $pp
ok "ibv_rc_pingpong works between $A and $B"

ip netns exec $A timeout 120 "$P" pair --listen $IPA --timeout 60 > /tmp/pair-srv.out 2>&1 & srv=$!
wait_line /tmp/pair-srv.out listening $srv 30
ip netns exec $B timeout 120 "$P" pair --connect $IPA --size 2M --timeout 60 > /tmp/pair-cli.out 2>&1; rc_cli=$?
wait $srv; rc_srv=$?
echo "--- server ($A)"; cat /tmp/pair-srv.out; echo "--- client ($B)"; cat /tmp/pair-cli.out
check "client: exit 0 (got $rc_cli)" test "$rc_cli" = 0
check "server: exit 0 (got $rc_srv)" test "$rc_srv" = 0
for f in /tmp/pair-srv.out /tmp/pair-cli.out; do
  check "$(basename $f .out): client->server PASS 2 MiB" grep -qE '^client->server +PASS +2 MiB' $f
  check "$(basename $f .out): server->client PASS 2 MiB" grep -qE '^server->client +PASS +2 MiB' $f
done
check "client used rxeB, server rxeA" bash -c 'grep -q "RDMA device rxeB" /tmp/pair-cli.out && grep -q "RDMA device rxeA" /tmp/pair-srv.out'

# Again with JSON on both sides.
ip netns exec $A timeout 120 "$P" --json pair --listen $IPA --port 18600 --timeout 60 > /tmp/pair-srv.json 2> /tmp/pair-srv.err & srv=$!
wait_line /tmp/pair-srv.err listening $srv 30
ip netns exec $B timeout 120 "$P" --json pair --connect $IPA --port 18600 --timeout 60 > /tmp/pair-cli.json 2>&1; rc_cli=$?
wait $srv; rc_srv=$?
for f in /tmp/pair-srv.json /tmp/pair-cli.json; do
  flat=$(tr -d ' \n' < $f)
  n=$(grep -o '"status":"pass","bytes":1048576,"verified_bytes":1048576' <<<"$flat" | wc -l)
  check "$(basename $f): two directions verified in JSON (got $n)" test "$n" = 2
done
check "JSON runs exit 0 ($rc_cli/$rc_srv)" test "$rc_cli$rc_srv" = 00 || cat /tmp/pair-srv.json /tmp/pair-srv.err /tmp/pair-cli.json

# A client asking for more than the server's --max-size is refused, and
# both sides say why.
ip netns exec $A timeout 120 "$P" pair --listen $IPA --port 18650 --max-size 64K --timeout 30 > /tmp/pair-max.out 2>&1 & srv=$!
wait_line /tmp/pair-max.out listening $srv 30
out=$(ip netns exec $B timeout 60 "$P" pair --connect $IPA --port 18650 --size 1M --timeout 20 2>&1); rc_cli=$?
wait $srv; rc_srv=$?
echo "$out"; cat /tmp/pair-max.out
check "over --max-size: server exit 1 with the reason (got $rc_srv)" bash -c '[ "$1" = 1 ] && grep -q "asked for a 1 MiB buffer; this server allows 1 byte to 64 KiB (--max-size)" /tmp/pair-max.out' _ "$rc_srv"
check "over --max-size: client refused, exit 1 (got $rc_cli)" bash -c '[ "$1" = 1 ] && grep -qE "^setup +FAIL" <<<"$2" && grep -q "remedy:" <<<"$2"' _ "$rc_cli" "$out"

# Nobody listening: the client fails with one readable line, exit 1.
out=$(ip netns exec $B timeout 60 "$P" pair --connect $IPA --port 18700 --timeout 5 2>&1); r=$?
echo "$out"
check "no listener: exit 1 (got $r)" test "$r" = 1
check "no listener: reported as a failed setup row" grep -qE '^setup +FAIL' <<<"$out"
check "no listener: with cause and remedy" bash -c 'grep -q "cause:" <<<"$1" && grep -q "remedy:" <<<"$1"' _ "$out"

# A server whose address is not on this host never listens: it must not say
# it does (scripts wait for "listening"), neither on stderr nor in its report.
ip netns exec $A timeout 30 "$P" pair --listen 203.0.113.9 --port 18750 --timeout 5 > /tmp/pair-nol.out 2> /tmp/pair-nol.err; r=$?
cat /tmp/pair-nol.out /tmp/pair-nol.err
check "bind to a foreign address: exit 1 (got $r)" test "$r" = 1
check "... no 'listening' line on stderr" bash -c '! grep -q listening /tmp/pair-nol.err'
check "... the report says it could not listen" grep -q '^could not listen on 203.0.113.9:18750' /tmp/pair-nol.out
ip netns exec $A timeout 30 "$P" --json pair --listen 203.0.113.9 --port 18751 --timeout 5 > /tmp/pair-nol.json 2>/dev/null
check "... JSON: listening false" grep -q '"listening": false' /tmp/pair-nol.json
finish
