#!/bin/bash
# module-modversions (issue 17): the binding on a kernel with symbol
# versions (CONFIG_MODVERSIONS=y with gendwarfksyms and extended
# modversions, as every Rust kernel with MODVERSIONS has: the debug kernel,
# Debian's patched source).  tests/bench/build.sh builds peermem_rs there as
# DKMS does on a host, against its providers' Module.symvers (the
# simulators'), plus two more builds (mods/<kernel>/weak, .../skew):
#  - the CRC build carries the providers' CRCs, loads without a word from
#    the loader and serves registrations;
#  - the weak fallback (no PEERMEM_SYMVERS): this kernel's loader does NOT
#    refuse it (no extended version for a symbol: one warning, and the load
#    goes on, even with Debian's "module: Disable matching missing version
#    CRC", which covers only the basic table), so peermem_rs refuses itself,
#    with one line that says why and what to do; allow_unversioned=1 accepts it;
#    without a core loaded it is refused for that (no peer-memory support);
#  - a build against a symvers whose CRC of nvidia_p2p_get_pages differs
#    (another driver build): the kernel refuses it.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

[ -f "$MODS/weak/peermem_rs.ko" ] ||
  skip "no CONFIG_MODVERSIONS on $(uname -r): the bench built no weak/skew variants (the debug kernel has it)"
SYMVERS=$PEERMEM/src/$(uname -r)/tests/sim/Module.symvers
crc_of() { awk -v s="$2" '$2 == s { print $1; exit }' "$1"; }
no_line() { ! log_since "$1" | grep -qE "$2"; } # no_line MARK ERE

# The CRC build, statically.
check "the bench's build names its binding: $(modinfo -F binding "$KO")" \
  test "$(modinfo -F binding "$KO")" = "crc: $SYMVERS"
vers=$(modprobe --dump-modversions "$KO" 2>&1)
for s in nvidia_p2p_get_pages nvidia_p2p_dma_map_pages ib_register_peer_memory_client; do
  want=$(crc_of "$SYMVERS" $s)
  got=$(awk -v s=$s '$2 == s { print $1; exit }' <<< "$vers")
  check "... __versions has $s with the simulator's CRC ($want)" test -n "$want" -a "$((got))" = "$((want))"
done

# The CRC build loads: the loader checks every provider symbol, says nothing.
check "simulated GPU + core" sim_load || finish
log_mark crc
check "insmod the CRC build" insmod "$KO"
check "... the loader said nothing about symbol versions" \
  no_line crc 'symbol version|disagrees about version|Unknown symbol'
check "... its load line names the binding" grep -qE "loaded: .*, binding crc: $SYMVERS\)$" <(log_since crc)
# shellcheck disable=SC2016 # simctl's own variables
check "... and it serves registrations" sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; core dereg $H; gpu free $A'
check "rmmod" rmmod "$PM_MODULE"

# The weak fallback: let through by the kernel, refused by peermem_rs.
log_mark weak
fails_with "the weak fallback: refused (ENOEXEC, kmod's 'Invalid module format')" 'Invalid module format|Exec format error' insmod "$MODS/weak/peermem_rs.ko"
check "... one line says why and what to do" \
  grep -qE "peermem_rs: built without the symbol versions of the peer-memory core and NVIDIA driver \(none was installed for this kernel when it was built\), but this kernel checks symbol versions \(CONFIG_MODVERSIONS\) and would let these calls through unchecked: with the peer-memory core and NVIDIA driver installed, rebuild: peermem-rs-refresh \(DKMS\), or make again \(from source\); or load with allow_unversioned=1 to accept it \(binding weak: no provider Module.symvers found\)$" <(log_since weak)
check "... the kernel's loader had let it through with a warning only (no extended symbol version for ...)" \
  grep -qE "no extended symbol version for (nvidia_p2p_|ib_(un)?register_peer_memory_client)" <(dmesg)
log_mark allow
check "allow_unversioned=1: it loads" insmod "$MODS/weak/peermem_rs.ko" allow_unversioned=1
check "... its load line says weak" grep -qE "loaded: .*, binding weak: no provider Module.symvers found\)$" <(log_since allow)
# shellcheck disable=SC2016 # simctl's own variables
check "... and it serves registrations" sim_run 'A=gpu alloc 2M; H=core reg $A 2M; core dma-check $H; core dereg $H; gpu free $A'
check "rmmod" rmmod "$PM_MODULE"

# Another driver's CRC: the kernel refuses the module before it runs.
log_mark skew
fails_with "a build against another nvidia_p2p_get_pages CRC: the kernel refuses it (EINVAL)" 'Invalid (argument|parameters)' \
  insmod "$MODS/skew/peermem_rs.ko"
check "... saying which symbol disagrees" \
  grep -q "peermem_rs: disagrees about version of symbol nvidia_p2p_get_pages" <(log_since skew)
check "... and peermem_rs never ran" no_line skew 'peermem_rs: version'
no_leaks
# Without a core, the weak fallback resolves no peer-memory reference: it is
# refused for that, in its own words, not asked to be rebuilt (issue 32,
# item 4: the unversioned refusal comes after the providers' lookup).
check "unload the simulated core" rmmod peer_core_sim
log_mark nocore
fails_with "the weak fallback without a core: refused (ENODEV)" 'No such device' insmod "$MODS/weak/peermem_rs.ko"
check "... saying there is no peer-memory support" grep -q "peermem_rs: no peer-memory support" <(log_since nocore)
check "... and not asking for a rebuild" no_line nocore 'rebuild'
check "unload the simulators" sim_unload
# (The CRC build's strong NVIDIA references without the driver: module-load.)
finish
