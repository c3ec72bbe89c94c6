#!/bin/bash
# module-contenders: two peermem-rs builds (peermem_rs.ko and the same
# module built as nvidia_peermem.ko) loaded at the same moment, many times:
# each round, exactly one of them is loaded and registered with the core,
# and the other is refused (issue 24, "parallel contenders resolved").
# Each build refuses to load beside the other (a competitor serves every GPU
# range, module-providers); checked in the loading module's init alone, two
# loads in flight could each see the other's module and both refuse.  The
# core here accepts a second client of a name (DOCA-OFED 25.10) so that two
# registrations would show.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

NV=$MODS/nvidia_peermem.ko
[ -f "$NV" ] || { bad "no $NV (the module built with PEERMEM_NAME=nvidia_peermem)"; finish; }
CORE_PARAMS="memory_peers=0 refuse_duplicate_names=0"
check "simulated GPU and a core that accepts a second client of a name" sim_load || finish
unset CORE_PARAMS

# The natural window (from a module's /sys/module entry, made before its
# init, to the check in its init) is too short to be hit in a few rounds
# under TCG: sim_widen.ko holds each contender 100 ms before its init
# (tests/simclients/widen.c).  The modules under test are unchanged.
widened=no
if insmod "$MODS/sim_widen.ko" delay_ms=100; then widened=yes
else echo "info - sim_widen.ko did not load (no kprobes?): the natural window only"; fi

ROUNDS=${CONTENDER_ROUNDS:-12}
one=0 none=0 both=0 won_rs=0 won_nv=0
log_mark contend
# Both insmods wait at one barrier (a FIFO: its writer's close wakes every
# reader), so that the two loads run side by side on the VM's two CPUs;
# which one is started first alternates.
GO=/tmp/contenders.go
for i in $(seq "$ROUNDS"); do
  rm -f $GO; mkfifo $GO
  if [ $((i % 2)) = 1 ]; then first=$KO second=$NV; else first=$NV second=$KO; fi
  (read -r _ < $GO; exec insmod "$first" 2>/dev/null) &
  (read -r _ < $GO; exec insmod "$second" 2>/dev/null) &
  sleep 0.2
  : > $GO
  wait
  loaded=$(grep -cE '^(peermem_rs|nvidia_peermem) ' /proc/modules)
  clients=$(core_get clients)
  case $loaded,$clients in
    1,1) one=$((one + 1))
         if grep -q '^peermem_rs ' /proc/modules; then won_rs=$((won_rs + 1)); else won_nv=$((won_nv + 1)); fi ;;
    0,*) none=$((none + 1)); echo "    round $i: both refused (core clients: $clients)" ;;
    *)   both=$((both + 1)); echo "    round $i: $loaded loaded, core clients: $clients" ;;
  esac
  # The winner serves GPU memory (last round: one registration through it).
  if [ "$i" = "$ROUNDS" ] && [ "$loaded,$clients" = 1,1 ]; then
    check "round $i: the winner serves a registration" \
      sim_run 'A=gpu alloc 1M; H=core reg $A 1M; core dma-check $H; core dereg $H'
  fi
  for m in peermem_rs nvidia_peermem; do
    grep -q "^$m " /proc/modules && rmmod_settled $m
  done
done
rm -f $GO
[ $widened = yes ] && rmmod sim_widen
echo "info - $ROUNDS rounds (window widened: $widened): one loaded $one (peermem_rs $won_rs, nvidia_peermem $won_nv), both refused $none, both loaded $both"
check "every round: exactly one loaded and registered ($one of $ROUNDS)" test "$one" = "$ROUNDS"
# The loser's reason is the loader's: the second build to load exports the
# symbol the first one holds (rust/glue.c).
check "... the loser was refused by the module loader (duplicate export)" \
  grep -qE '(peermem_rs|nvidia_peermem): exports duplicate symbol peermem_rs_one_per_kernel \(owned by (peermem_rs|nvidia_peermem)\)' <(log_since contend)
check "no module of ours left" bash -c '! grep -qE "^(peermem_rs|nvidia_peermem) " /proc/modules'
check "the core has no client left" test "$(core_get clients)" = 0
check "zero contract violations" sim_check
check "unload the simulators" sim_unload
finish
