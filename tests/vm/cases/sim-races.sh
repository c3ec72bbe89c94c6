#!/bin/bash
# sim-races: cudaFree racing registration and deregistration, made
# reproducible by the core's step hooks, then at random from concurrent
# threads and processes, and unregistering a client that still serves a
# registration -- all with the well-behaved client, so zero
# violations, and (on the debug kernel) no lockdep or KASAN report.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/sim-common.inc"
# The self-test checks the current core's behaviour, whatever the boot's variant.
CORE_PARAMS="honour_unmaps=1 sg_page_shift=0"
[ -x "$SIMCTL" ] || { bad "no $SIMCTL"; finish; }
check "load the simulators" sim_load || finish
check "load simclient_good" sim_client good

# Step hooks: a cudaFree of the registered VA from another thread.
check "free after acquire: get_pages refuses, the core unwinds (release)" \
  sim_run 'A=gpu alloc 2M; !EINVAL core reg $A 2M --hook after_acquire:free; gpu get pins; core get hook_frees'
has "^0$" || bad "pin left"
check "free after get_pages (mapping lock held): dma_map fails, unwound" \
  sim_run 'A=gpu alloc 2M; !EINVAL core reg $A 2M --hook after_get_pages:free; gpu get pins'
has "^0$" || bad "pin left"
check "free after dma_map: the invalidation waits for the registration, then fences it" \
  sim_run 'A=gpu alloc 2M; H=core reg $A 2M --hook after_dma_map:free; !ESTALE until 10000 core dma-check $H; core get invalidate_waited; core dereg $H; gpu get pins'
has "^1$" && ok "invalidate waited for the in-flight registration" || bad "invalidate_waited"
check "free during dereg (mapping lock held): no deadlock" \
  sim_run 'A=gpu alloc 2M; H=core reg $A 2M --hook in_dereg:free; core dereg $H; gpu get pins; gpu get allocations'
check "a delay hook holds the mapping lock while another thread frees" \
  sim_run 'A=gpu alloc 2M; & ?core reg $A 2M --hook after_get_pages:delay:300; sleep 100; gpu free $A; wait; gpu get pins'
has "^0$" || bad "pin left"

# The driver knows a dma_map_pages call's table by its address alone: it
# reads the table before taking its lock and links the new mapping into the
# table's bookkeeping after dropping it (nv-p2p.c).  A cudaFree in either
# window frees the table (simclient's callback does not wait for a
# registration still in dma_map), and a pin another thread makes meanwhile
# gets the freed table's address: the driver maps that pin for the caller
# (prologue) or links the caller's mapping into it (epilogue).  That pin's
# owner never made the mapping: its put frees it, with no put_before_unmap.
for site in map_prologue map_epilogue; do
  n0=$(gpu_get map_newer_pin 2>/dev/null || echo none); r0=$(gpu_get map_raced_free)
  check "$site: cudaFree, then another thread's pin gets the freed table's address" \
    sim_run "A=gpu alloc 2M; B=gpu alloc 2M; gpu hook $site 1 1500; & !EINVAL core reg \$A 2M; sleep 400; H=core reg \$B 2M; wait; gpu get mappings; core dma-check \$H; core dereg \$H; gpu get mappings; gpu get pins; gpu free \$B"
  check "... the newer pin held the caller's mapping and its own; its put freed both" \
    test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 2,0,0
  check "... the driver went on with the newer pin (map_newer_pin: $n0, then +1)" \
    test "$(gpu_get map_newer_pin 2>/dev/null)" = "$((n0 + 1))"
  check "... one raced call, counted once (map_raced_free: $r0, then +1)" test "$(gpu_get map_raced_free)" = "$((r0 + 1))"
done
# With no newer pin at the address, the driver goes on with what the freed
# table held: after a free in the prologue it reads the freed table and maps
# the freed memory's addresses; in the epilogue it links the mapping into
# the freed bookkeeping (a write into freed memory).  These reads and writes
# are `driver_reads` (off on the debug kernel; hazard-map-prologue and
# hazard-map-epilogue run them in the controls' boot).  Either way the
# caller gets the mapping, and the driver never frees it.
for site in map_prologue map_epilogue; do
  o0=$(gpu_get orphan_mappings); r0=$(gpu_get map_raced_free)
  w0=$(dmesg | grep -c "linked the mapping into the freed bookkeeping")
  check "$site, no newer pin: the mapping is handed out and never freed" \
    sim_run "A=gpu alloc 2M; gpu hook $site 1; !EINVAL core reg \$A 2M; gpu get pins; gpu get mappings"
  check "... (pins, mappings: 0,0; orphan_mappings +1)" \
    test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,),$(gpu_get orphan_mappings)" = "0,0,$((o0 + 1))"
  check "... one raced call, counted once (map_raced_free: $r0, then +1)" test "$(gpu_get map_raced_free)" = "$((r0 + 1))"
  if [ "$(param nvidia_p2p_sim driver_reads)" = Y ]; then
    check "... linked into the freed bookkeeping (the driver's write)" \
      test "$(dmesg | grep -c "linked the mapping into the freed bookkeeping")" -gt "$w0"
  fi
done
check "no put_before_unmap, nor any other violation" sim_check

# The legacy flavour (dma_unmap/put_pages from inside invalidate).
rmmod simclient_good
check "legacy client (unmaps=0)" sim_client good unmaps=0
check "legacy: free after dma_map and during dereg" \
  sim_run 'A=gpu alloc 2M; H=core reg $A 2M --hook after_dma_map:free; !ESTALE until 10000 core dma-check $H; core dereg $H
           B=gpu alloc 2M; H2=core reg $B 2M --hook in_dereg:free; core dereg $H2; gpu get pins'
rmmod simclient_good
check "simclient_good again" sim_client good

# Threads of one process: registrations race a cudaFree of their memory.
check "threads: 4 x 10 registrations racing cudaFree and context teardown" sim_run '
  A=gpu alloc 8M fragmented:4
  & ? repeat 10 core reg $A 8M
  & ? repeat 10 core reg $A+1M 2M
  & ? repeat 10 core reg $A+0x1234 0x10000
  & ? repeat 10 core reg $A+4M 4M
  sleep 50
  gpu free $A
  wait
  B=gpu alloc 4M shuffled
  & ? repeat 10 core reg $B 4M
  & ? repeat 10 core reg $B+64K 64K
  close gpu
  wait
  gpu get pins
  gpu get mappings'
has "^0$" || bad "pins/mappings left"

# Processes: each with its own GPU memory, concurrently.
pids=
for i in 1 2 3; do
  "$SIMCTL" run 'A=gpu alloc 4M fragmented:2; H=core reg $A 4M; & ? repeat 5 core reg $A 1M; gpu free $A; wait; core dereg $H' > /tmp/race-$i.out 2>&1 &
  pids="$pids $!"
done
r=0; for p in $pids; do wait $p || r=1; done
check "3 processes registering and freeing concurrently" test $r = 0 || cat /tmp/race-*.out
check "no pins, mappings or registrations left" sim_run 'gpu get pins; gpu get mappings; core get registrations'
[ "$(grep -c '^0$' <<< "$SIM_OUT")" = 3 ] || bad "leftovers"

# A non-persistent put from another process finds no pin of that process
# (module-foreign-put); MPS adds client processes to the P2P object's
# client list (client_pids; -1: every process): a forked child's put then
# releases the pin.  (Only this half here: simclient_good frees its
# context after its put, so an ignored one would leave the driver a
# callback on freed memory -- the test client's simplification.)
param nvidia_p2p_sim client_pids -1
check "with the child on the client list (MPS) its put releases the pin" \
  sim_run 'gpu reset; A=gpu alloc 1M; H=core reg $A 1M; fork core dereg $H; gpu get foreign_puts; gpu get pins'
check "... (foreign_puts, pins: 0,0)" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 0,0
param nvidia_p2p_sim client_pids 0

# ib_unregister_peer_memory_client blocks until the client's registrations
# are gone (here: until the process holding one exits).
"$SIMCTL" run 'A=gpu alloc 1M; H=core reg $A 1M; echo registered; sleep 3600000' > /tmp/holder.out 2>&1 & holder=$!
check "a process holds a registration" wait_line /tmp/holder.out '^registered' $holder || cat /tmp/holder.out
rmmod simclient_good & rm_pid=$!
sleep 1
check "rmmod of the client blocks while a registration exists" kill -0 $rm_pid
check "... held by a process still alive" kill -0 $holder
kill $holder; wait $holder 2>/dev/null
check "... and completes once the registration is gone" wait $rm_pid
check "the client is gone" bash -c '! grep -q "^simclient_good " /proc/modules'

check "zero violations" sim_check
check "unload" sim_unload
finish
