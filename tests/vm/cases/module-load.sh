#!/bin/bash
# module-load: peermem_rs.ko loads, logs its version, shows its metadata in
# modinfo, and unloads cleanly.
. "${vmstage:-/peermem}/vm/lib.sh"
KO=$MODS/peermem_rs.ko
[ -f "$KO" ] || { bad "no $KO"; finish; }
ver=$(cat "$PEERMEM/src/$(uname -r)/VERSION")
info=$(modinfo "$KO")
echo "$info" | grep -E '^(filename|license|version|description|author|vermagic|name):'
check "modinfo license is GPL-compatible" grep -qE '^license: +(GPL|GPL v2|Dual [A-Z]+/GPL)$' <<< "$info"
check "modinfo version is $ver" grep -qE "^version: +$ver\$" <<< "$info"
check "modinfo has a description" grep -qE '^description: +.*peer-memory' <<< "$info"
check "vermagic matches the running kernel" test "$(awk '$1 == "vermagic:" {print $2}' <<< "$info")" = "$(uname -r)"
log_mark load
check "insmod peermem_rs" insmod "$KO"
check "listed in /proc/modules" grep -q '^peermem_rs ' /proc/modules
check "logs its version at load" grep -qE "peermem_rs $ver loaded" <(log_since load)
check "rmmod peermem_rs" rmmod peermem_rs
check "gone from /proc/modules" bash -c '! grep -q "^peermem_rs " /proc/modules'
check "logs its unload" grep -q 'peermem_rs unloaded' <(log_since load)
finish
