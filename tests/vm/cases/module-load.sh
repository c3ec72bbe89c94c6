#!/bin/bash
# module-load: peermem_rs.ko's metadata, and its load with no provider at
# all: it must refuse with one kernel-log line that names the missing
# peer-memory core and what to do, and leave nothing behind.  (Loads next to
# the simulated providers are in the module-* cases.)
. "${vmstage:-/peermem}/vm/lib.sh"
KO=$MODS/peermem_rs.ko
[ -f "$KO" ] || { bad "no $KO"; finish; }
ver=$(cat "$PEERMEM/src/$(uname -r)/VERSION")
info=$(modinfo "$KO")
echo "$info" | grep -E '^(filename|license|version|description|author|vermagic|name|softdep|parm):'
check "modinfo license is GPL-compatible" grep -qE '^license: +(GPL|GPL v2|Dual [A-Z]+/GPL)$' <<< "$info"
check "modinfo version is $ver" grep -qE "^version: +$ver\$" <<< "$info"
check "modinfo has a description" grep -qE '^description: +.*peer-memory' <<< "$info"
check "modinfo documents the mode parameter" grep -qE '^parm: +mode:.*persistent.*invalidate' <<< "$info"
check "modinfo documents the client name parameter" grep -qE '^parm: +peer_client_name:.*nv_mem' <<< "$info"
check "modinfo has a softdep on its providers" grep -qE '^softdep: +pre: ib_uverbs nvidia' <<< "$info"
check "vermagic matches the running kernel" test "$(awk '$1 == "vermagic:" {print $2}' <<< "$info")" = "$(uname -r)"
binding=$(modinfo -F binding "$KO")
case $binding in
  "weak: no provider Module.symvers found")
    check "no provider symbols linked (looked up at load time)" \
      bash -c "! modinfo -F depends '$KO' | grep -q ."
    nvidia= ;;
  *) # Built against the simulators' Module.symvers (a kernel with symbol
     # versions, module-modversions): modpost names both providers, and the
     # NVIDIA references are strong.
    deps=$(modinfo -F depends "$KO" | tr , '\n')
    check "binding '$binding': depends on both providers ($(paste -sd, <<< "$deps"))" \
      test "$(grep -cx peer_core_sim <<< "$deps"),$(grep -cxE 'nvidia_p2p_sim(_plain)?' <<< "$deps")" = 1,1
    log_mark nonv
    fails_with "... without the NVIDIA driver the loader refuses it (strong references)" 'Unknown symbol' insmod "$KO"
    check "... and names the NVIDIA symbol" grep -qE "peermem_rs: Unknown symbol nvidia_p2p_[a-z_]+ \(err" <(log_since nonv)
    check "with the NVIDIA driver only" insmod "$MODS/nvidia_p2p_sim.ko" || finish
    nvidia=nvidia_p2p_sim ;;
esac
log_mark load
fails_with "insmod without a peer-memory core fails with ENODEV" 'No such device' insmod "$KO"
check "one log line names the missing core and the remedy" \
  grep -qE 'peermem_rs: no peer-memory support \(ib_register_peer_memory_client not found\): load ib_uverbs first .* install MLNX_OFED/DOCA-OFED, or register GPU memory with dma-buf' <(log_since load)
check "not left loaded" bash -c '! grep -q "^peermem_rs " /proc/modules'
[ -z "$nvidia" ] || check "unload $nvidia" rmmod "$nvidia"
finish
