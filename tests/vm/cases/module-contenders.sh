#!/bin/bash
# module-contenders: peermem-rs loaded twice at the same moment, many
# times; each round exactly one load is in and registered with the core,
# and the other is refused -- by the kernel or by the core, never by a look
# of ours at other modules (issue 32: the module has no competitor check
# and exports no symbol):
#   1. the same module twice (peermem_rs.ko and a copy of it: another
#      file: since Linux 6.6 the loader folds two finit_module calls
#      on one file into one load and gives both its result): the kernel's
#      module loader refuses a second module of a name (EEXIST), which is
#      all the uniqueness the test build under the name peermem_rs has;
#   2. two builds under different module names (peermem_rs.ko and the same
#      module built as nvidia_peermem.ko), both as client nv_mem, on a core
#      with memory_peers: the core refuses the second client of a name
#      under its lock (NULL), and the loser says the name is taken (EBUSY).
# On a core that accepts a second client of a name (DOCA-OFED 25.10) two
# builds both load and the second serves nothing: packaging keeps them
# apart and peermem-probe doctor reports them (module-providers, probe-doctor).
# shellcheck disable=SC2016 # simctl's own variables (sim_run)
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

NV=$MODS/nvidia_peermem.ko
[ -f "$NV" ] || { bad "no $NV (the module built with PEERMEM_NAME=nvidia_peermem)"; finish; }
CORE_PARAMS=memory_peers=1
check "simulated GPU and a core with memory_peers (refuses a second client of a name)" sim_load || finish
unset CORE_PARAMS

# sim_widen.ko holds each load 100 ms at the module loader's
# do_init_module (tests/simclients/widen.c), so that under TCG both loads
# are in flight together: for two names, both inits then run side by side
# and meet in the core's register.  The modules under test are unchanged.
widened=no
if insmod "$MODS/sim_widen.ko" delay_ms=100; then widened=yes
else echo "info - sim_widen.ko did not load (no kprobes?): the natural window only"; fi

ROUNDS=${CONTENDER_ROUNDS:-12}
GO=/tmp/contenders.go
# contend A B WHAT -- ROUNDS rounds of `insmod A` and `insmod B` at the same
# moment (both wait at one barrier, a FIFO whose writer's close wakes every
# reader; which one starts first alternates).  Counts the rounds where
# exactly one module of ours is loaded and the core has one client, and
# keeps the losers' insmod errors in $ERRS.
contend() {
  local a=$1 b=$2 what=$3 i first second loaded clients
  one=0 none=0 both=0; ERRS=/tmp/contenders.$what.err; : > "$ERRS"
  for i in $(seq "$ROUNDS"); do
    rm -f $GO; mkfifo $GO
    if [ $((i % 2)) = 1 ]; then first=$a second=$b; else first=$b second=$a; fi
    (read -r _ < $GO; exec insmod "$first" 2>> "$ERRS") &
    (read -r _ < $GO; exec insmod "$second" 2>> "$ERRS") &
    sleep 0.2
    : > $GO
    wait
    loaded=$(grep -cE '^(peermem_rs|nvidia_peermem) ' /proc/modules)
    clients=$(core_get clients)
    case $loaded,$clients in
      1,1) one=$((one + 1)) ;;
      0,*) none=$((none + 1)); echo "    $what round $i: both refused (core clients: $clients)" ;;
      *)   both=$((both + 1)); echo "    $what round $i: $loaded loaded, core clients: $clients" ;;
    esac
    # The winner serves GPU memory (last round: one registration through it).
    if [ "$i" = "$ROUNDS" ] && [ "$loaded,$clients" = 1,1 ]; then
      check "$what, round $i: the winner serves a registration" \
        sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dma-check $H; core dereg $H'
    fi
    for m in peermem_rs nvidia_peermem; do
      grep -q "^$m " /proc/modules && rmmod_settled $m
    done
  done
  rm -f $GO
  echo "info - $what: $ROUNDS rounds (window widened: $widened): one loaded $one, both refused $none, both loaded $both"
  check "$what: every round exactly one loaded and registered ($one of $ROUNDS)" test "$one" = "$ROUNDS"
}

# 1. One module name: the kernel lets one in.
cp "$KO" /tmp/peermem_rs-copy.ko
log_mark same
contend "$KO" /tmp/peermem_rs-copy.ko same-name
check "... the loser was refused by the module loader: File exists (EEXIST), $ROUNDS times" \
  test "$(grep -c 'File exists' "$ERRS")" = "$ROUNDS"
check "... and never by the core (the loser's init never ran)" \
  no_log_line 'refused the client name' same

# 2. Two module names, one client name: the core lets one in.
log_mark names
contend "$KO" "$NV" two-names
check "... the loser was refused with EBUSY (Device or resource busy), $ROUNDS times" \
  test "$(grep -c 'Device or resource busy' "$ERRS")" = "$ROUNDS"
check "... by the core: it says the name is registered" \
  grep -q "ib_register_peer_memory_client: a client named 'nv_mem' is already registered" <(log_since names)
check "... and the loser says the core refused the name: unload the other client" \
  grep -qE "(peermem_rs|nvidia_peermem): the RDMA core refused the client name 'nv_mem': another loaded peer-memory client holds it" <(log_since names)
check "... no module refused another by looking at it (no competitor check left)" \
  no_log_line 'the loaded module .* is a peer-memory client|exports duplicate symbol' same

[ $widened = yes ] && rmmod sim_widen
check "no module of ours left" bash -c '! grep -qE "^(peermem_rs|nvidia_peermem) " /proc/modules'
check "the core has no client left" test "$(core_get clients)" = 0
check "zero contract violations" sim_check
check "unload the simulators" sim_unload
finish
