#!/bin/bash
# sim-violations: the simulators' self-test.  simclient_bad commits each
# contract violation in turn (its `bug` parameter); for each, the
# simulators must report exactly that violation: its counter (and no other
# counter of either simulator), its log line and its WARN.  The facts each
# check enforces are listed in tests/sim/README.md.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/sim-common.inc"
# The self-test checks the current core's behaviour, whatever the boot's variant.
CORE_PARAMS="honour_unmaps=1 sg_page_shift=0"
[ -x "$SIMCTL" ] || { bad "no $SIMCTL"; finish; }
sim_expect_warn
check "load the simulators" sim_load || finish
check "load simclient_bad" sim_client bad || finish
BUG=/sys/module/simclient_bad/parameters/bug

# logged KIND MARK -- KIND was logged and WARNed since MARK.
logged() {
  local kind=$1 log
  log=$(log_since "$2")
  if [[ $log == *"contract violation $kind: "* ]]; then
    local line=${log#*"contract violation $kind: "}
    ok "$kind: logged: ${line%%$'\n'*}"
  else
    bad "$kind: no log line"
  fi
  [[ $log == *"WARNING: "* && $log == *"contract violation: $kind"* ]] && ok "$kind: WARN" || bad "$kind: no WARN"
}

# expect_only KIND MARK -- exactly KIND counted (nothing else in either
# simulator), logged and WARNed since MARK.
expect_only() {
  local out
  if out=$("$SIMCTL" check "$1+" 2>&1); then ok "$1: counted, nothing else ($out)"; else bad "$1: $out"; fi
  logged "$1" "$2"
}

# provoke KIND SCRIPT -- simclient_bad commits KIND while SCRIPT runs; one
# simctl process resets the counters (re-arming the WARNs), sets the bug,
# runs the scenario and checks that exactly KIND was counted.
provoke() {
  local kind=$1 out
  log_mark "v-$kind"
  if out=$("$SIMCTL" run "gpu reset; core reset; write $BUG $kind; $2; write $BUG none; check $kind+" 2>&1); then
    ok "$kind: counted, nothing else (${out##*check ok })"
  else
    bad "$kind:"; sed 's/^/    /' <<< "$out"
    echo none > $BUG
  fi
  logged "$kind" "v-$kind"
}

REG='A=gpu alloc 1M; H=core reg $A 1M; core dereg $H'
FREE='A=gpu alloc 1M; H=core reg $A 1M; gpu free $A; ?core dma-check $H; core dereg $H'

# --- nvidia_p2p_sim ------------------------------------------------------
provoke misaligned 'A=gpu alloc 1M; !EFAULT core reg $A+0x1000 0x1000'
provoke null_callback 'A=gpu alloc 1M; !EFAULT core reg $A 1M'
provoke foreign_va 'A=gpu alloc 1M; !EFAULT core reg $A 1M'
provoke put_in_callback "$FREE"
provoke api_in_callback "$FREE"
# The driver reads the mapping a dma_unmap_pages is given (driver_reads):
# after the callback freed it, a KASAN report on the debug kernel, where
# sim_load turns the reads off: there the violation is checked without it.
provoke use_after_free_callback "$FREE"
# dma_unmap_pages takes no API lock in the real driver: from inside a free
# callback it works, and is no violation (simclient_bad's unmap_in_callback
# does it).
log_mark v-unmap-in-callback
if out=$("$SIMCTL" run "gpu reset; core reset; write $BUG unmap_in_callback; $FREE; write $BUG none; gpu get calls.dma_unmap_pages; check" 2>&1) &&
   [ "$(grep -xE '[0-9]+' <<< "$out" | tail -1)" = 1 ]; then
  ok "dma_unmap_pages from inside a free callback works (1 unmap, nothing counted)"
else
  bad "dma_unmap_pages from inside a free callback:"; sed 's/^/    /' <<< "$out"; echo none > $BUG
fi
provoke use_after_put "$REG"
provoke double_put "$REG"
provoke unknown_object "$REG"
# A revocable pin's put frees its mappings with the table (nv-p2p.c
# nv_p2p_put_pages -> nv_p2p_free_page_table; tests/sim/README.md): a put
# before the unmap is no violation, and leaves no mapping behind.
if out=$("$SIMCTL" run "gpu reset; core reset; write $BUG put_before_unmap; $REG; write $BUG none; gpu get mappings; check" 2>&1) &&
   [ "$(grep -xE '[0-9]+' <<< "$out" | tail -1)" = 0 ]; then
  ok "put_pages of a revocable pin before its unmap: no violation, the put freed the mapping"
else
  bad "put_pages of a revocable pin before its unmap:"; sed 's/^/    /' <<< "$out"; echo none > $BUG
fi
param peer_core_sim hca_nonpci 1
provoke non_pci_peer 'A=gpu alloc 1M; !EINVAL core reg $A 1M'
param peer_core_sim hca_nonpci 0
provoke wrong_peer "$REG"
provoke bad_args "$REG"
param nvidia_p2p_sim callback_timeout_ms 300
provoke callback_deadlock "$FREE"
param nvidia_p2p_sim callback_timeout_ms 5000

# The GPU VA is only valid in its own process.
"$SIMCTL" run 'gpu reset; core reset' > /dev/null
log_mark v-foreign-process
"$SIMCTL" run 'A=gpu alloc 1M; echo VA $A; sleep 3600000' > /tmp/p1.out 2>&1 & p1=$!
check "another process allocated GPU memory" wait_line /tmp/p1.out '^VA ' $p1 || cat /tmp/p1.out
va=$(sed -n 's/^VA //p' /tmp/p1.out)
check "another process cannot register the VA (not claimed)" "$SIMCTL" run "!EFAULT core reg $va 1M"
check "... while its owner was alive" kill -0 $p1
kill $p1; wait $p1 2>/dev/null
# The driver answers a VA of another process "not found" (EINVAL): a user
# error, not the client's; the violation is a client pinning from a kernel
# thread (foreign_va above).
check "a user's foreign VA is not counted against the client" sim_check

# --- peer_core_sim ------------------------------------------------------
provoke sg_coverage 'A=gpu alloc 1M; !EINVAL core reg $A 1M'
provoke sg_address "$REG"
provoke nmap_mismatch 'A=gpu alloc 1M; !EINVAL core reg $A 1M'
provoke sg_trim 'A=gpu alloc 1M; !EINVAL core reg $A+0x2000 0x4000'
provoke bad_page_size 'A=gpu alloc 1M; !EINVAL core reg $A 1M'
provoke dma_map_dirty 'A=gpu alloc 1M; !ENOMEM core reg $A 1M'
provoke unmap_error "$REG"
provoke invalidate_unknown_id "$FREE"
provoke bad_handle "$FREE"
provoke dma_after_free 'A=gpu alloc 1M; H=core reg $A 1M; gpu free $A; !EFAULT core dma-check $H; core dereg $H'
provoke bad_return 'A=gpu alloc 1M; !EINVAL core reg $A 1M'
# An invalidation from inside the free callback that would wait for a
# mapping lock whose holder (a deregistration on a core without
# INVALIDATE_UNMAPS) waits for the driver's lock the callback holds: the
# real core hangs; the simulated one says so at once (EDEADLK).
param peer_core_sim honour_unmaps 0
provoke invalidate_deadlock 'A=gpu alloc 1M; H=core reg $A 1M --hook in_dereg:free; core dereg $H'
param peer_core_sim honour_unmaps 1

# A malformed client (a NULL callback) is refused at registration.
rmmod simclient_bad
"$SIMCTL" run 'gpu reset; core reset' > /dev/null
log_mark v-bad-client
check "simclient_bad bug=bad_client loads (its malformed second client is refused)" sim_client bad bug=bad_client
expect_only bad_client v-bad-client
rmmod simclient_bad

# A persistent pin keeps the teardown order (tests/sim/README.md): its put
# while a mapping of the table is live is a put_before_unmap.
"$SIMCTL" run 'gpu reset; core reset' > /dev/null
check "simclient_bad persistent=1" sim_client bad persistent=1
provoke put_before_unmap "$REG"
rmmod simclient_bad

# Pins still held when the GPU driver unloads (a leaked persistent pin).
check "simclient_bad bug=pins_at_unload" sim_client bad bug=pins_at_unload
check "a persistent pin is leaked" sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dereg $H; gpu get persistent_pins'
has "^1$" || bad "no leaked pin"
log_mark v-unload
check "unload everything" sim_unload
log_since v-unload | grep -q "contract violation pins_at_unload: " && ok "pins_at_unload: logged at unload" || bad "pins_at_unload: no log line"
log_since v-unload | grep -q "contract violation: pins_at_unload" && ok "pins_at_unload: WARN" || bad "pins_at_unload: no WARN"
finish
