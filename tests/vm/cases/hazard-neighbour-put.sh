#!/bin/bash
# hazard-neighbour-put (issue 24, item 2): a negative control of the bench
# (tests/vm/selfcheck.list, never in suite.list), run in the debug kernel's
# controls boot.  Another in-kernel user of the P2P API in the same process
# (tests/simclients/neighbour.c: gdrdrv or nvidia-fs on a real host) puts a
# pin while a cudaFree of its memory runs.  The driver frees that pin's
# table after its callback, our next registration gets the address
# (kmalloc's LIFO, reuse_freed=1), and the neighbour's put then finds our
# pin by it and releases it, mappings and all (nv-p2p.c finds revocable
# pins by table address; nv_p2p_free_page_table frees every mapping).  Our
# pin/put gate covers our own puts, not a neighbour's.  At deregistration
# peermem_rs unmaps what the driver freed: the simulated driver reads it,
# as the real one does (driver_reads=1), and KASAN must report it.  The
# case MUST fail for that report: the hazard no client closes today (README,
# "What no client can close"); module-neighbour shows mode=persistent
# avoids it.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + $PM_MODULE mode=invalidate" pm_up mode=invalidate || finish
check "the same-process neighbour (sim_neighbour.ko)" insmod "$MODS/sim_neighbour.ko"
param nvidia_p2p_sim driver_reads 1
check "the freed table's address goes to the next pin (reuse_freed)" test "$(param nvidia_p2p_sim reuse_freed)" = Y
neighbour_race; r=$?
check "the neighbour's put released our pin (put_released_other_pin=${NB_OTHER:-?}, simctl rc $r)" test "${NB_OTHER:-0}" -ge 1
"$SIMCTL" gpu reset > /dev/null 2>&1
check "sim_neighbour unloads" rmmod sim_neighbour
check "unload" pm_down
finish
