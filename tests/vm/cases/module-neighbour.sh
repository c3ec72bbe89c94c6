#!/bin/bash
# module-neighbour (issue 24, item 2): a same-process neighbour of the P2P
# API (sim_neighbour.ko; gdrdrv or nvidia-fs on a real host) puts its pin
# while a cudaFree of its memory runs.  The driver frees that pin's table
# after its callback, our next registration gets the address (kmalloc's
# LIFO, reuse_freed=1), and the neighbour's put then finds our pin by it and
# releases it, mappings and all (nv-p2p.c finds revocable pins by table
# address; nv_p2p_free_page_table frees every mapping).  Our fence covers
# our own puts and maps, not a neighbour's.
#
# mode=invalidate: peermem_rs never DMA-unmaps a revocable pin through the
# driver (the put releases pin and mappings together), so at deregistration
# it touches nothing the neighbour's put freed: its put finds no pin and
# returns 0.  Before that fix the deregistration's dma_unmap_pages read the
# freed mapping (KASAN: slab-use-after-free in driver_reads_mapping, with
# driver_reads=1, set here on every kernel).
# mode=persistent: the driver looks a late put_pages up among revocable
# pins only (RM keeps persistent pins outside the process's third-party
# P2P objects), so the race finds no pin of ours at all.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

check "providers + $PM_MODULE mode=invalidate" pm_up mode=invalidate || finish
check "the same-process neighbour (sim_neighbour.ko)" insmod "$MODS/sim_neighbour.ko"
param nvidia_p2p_sim driver_reads 1
check "the freed table's address goes to the next pin (reuse_freed)" test "$(param nvidia_p2p_sim reuse_freed)" = Y
check "the neighbour's late put, then our registration's DMA check and deregistration" neighbour_race
check "... released our pin (neighbour_released_pins=${NB_OTHER:-?})" test "${NB_OTHER:-0}" -ge 1
check "... our deregistration made no dma_unmap_pages call" \
  test "$(gpu_get calls.dma_unmap_pages)" = 0
# The neighbour's put and what it did to our registration (mapped for the
# HCA while its pin is gone, seen at the DMA check: no client can close
# that, README) are counted as the neighbour's harm, not as violations.
check "... seen at our DMA check (dma_after_neighbour_put)" test "$(core_get dma_after_neighbour_put)" = 1
# The cascade: once the neighbour's put released our pin, the driver may
# give that freed table's address to our next pin (reuse_freed).  The first
# registration's put then releases the second registration's pin, mappings
# and all, and that MR's DMA finds its pages gone.  peermem_rs no longer
# guesses a release from table addresses (issue 32): a same-process
# neighbour gets what the real core gives its own clients, no more (README,
# "What no client can close"; modinfo's `mode`).  The simulators still
# report it, as put_released_other_pin and the second MR's dma_after_free
# (its DMA check fails with EFAULT), and the module must survive it.
check "the neighbour releases our pin, our next pin gets its table's address, then both deregister" \
  sim_run "A=gpu alloc 1M --at 0x540000000000; B=gpu alloc 1M; C=gpu alloc 1M; write /dev/sim_neighbour pin:0x540000000000:0x100000; gpu hook put 1 1500; & ? write /dev/sim_neighbour put; sleep 300; H=core reg \$B 1M; wait; gpu get neighbour_released_pins; H2=core reg \$C 1M; core dereg \$H; gpu get pins; !EFAULT core dma-check \$H2; core dereg \$H2; gpu free \$B; gpu free \$C"
check "... the neighbour released the first pin, the first deregistration the second pin" \
  test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 2,0
check "... reported as our late put releasing another pin (put_released_other_pin=1)" \
  test "$(gpu_get violation.put_released_other_pin)" = 1
check "... and the second MR's DMA finding its pages gone (dma_after_free=1)" \
  test "$(core_get violation.dma_after_free)" = 1
# The first race again, but the memory is freed before anything checks our
# registration: the free's sweep is the first to see it still mapped with
# its pin gone, and the pages are no longer the driver's.  Still the
# neighbour's harm, whenever it is seen (nvsim keeps that memory out of the
# kernel's hands until unload); before that was so, the sweep counted it as
# our dma_after_free (the stress campaign's --neighbour hit it once in CI).
n0=$(gpu_get neighbour_released_pins); d0=$(core_get dma_after_neighbour_put); f0=$(core_get violation.dma_after_free)
check "the neighbour's late put releases our pin, then that memory is freed before our deregistration" \
  sim_run "A=gpu alloc 1M --at 0x580000000000; B=gpu alloc 1M; write /dev/sim_neighbour pin:0x580000000000:0x100000; gpu hook put 1 1500; & ? write /dev/sim_neighbour put; sleep 300; H=core reg \$B 1M; wait; gpu get neighbour_released_pins; gpu free \$B; core dereg \$H"
check "... it released our pin (neighbour_released_pins: $n0, then +1)" \
  test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | head -n 1)" = "$((n0 + 1))"
check "... the free's sweep counted the neighbour's harm (dma_after_neighbour_put: $d0, then +1)" \
  test "$(core_get dma_after_neighbour_put)" = "$((d0 + 1))"
check "... not our dma_after_free (stays $f0)" test "$(core_get violation.dma_after_free)" = "$f0"
# The dma_map direction: our dma_map_pages held after a cudaFree freed its
# table, while the neighbour pins other memory.  The neighbour's pin gets the
# freed table's address (reuse_freed) and our fence redoes only our pins, so
# the driver goes on with it for us: it maps the neighbour's memory
# (prologue) or links our mapping into its pin (epilogue).  We answer EFAULT
# and leave the mapping to the driver; the neighbour's put frees it.  The
# simulated driver counts that as the neighbour's harm
# (map_newer_neighbour_pin), not as a newer pin of ours (map_newer_pin,
# which module-map-race shows our fence undoing).  driver_reads=0: should
# the neighbour's pin miss the address, the driver's read of the freed table
# is a failed check here, not a KASAN report for the rest of the boot.  The
# neighbour pins 1.5 s after our registration started (it must reach the
# hook first: on the debug kernel under TCG, 0.4 s was once too short).
param nvidia_p2p_sim driver_reads 0
for site in map_prologue map_epilogue; do
  n0=$(gpu_get map_newer_pin); m0=$(gpu_get map_newer_neighbour_pin)
  log_mark "nb-$site"
  check "$site held 4 s after the free while the neighbour pins other memory 1.5 s in" \
    sim_run "A=gpu alloc 1M; B=gpu alloc 1M --at 0x560000000000; gpu hook $site 1 4000; & !EFAULT core reg \$A 1M; sleep 1500; write /dev/sim_neighbour pin:0x560000000000:0x100000; wait; gpu get mappings; write /dev/sim_neighbour put; gpu get mappings; gpu get pins; gpu free \$B"
  check "... the neighbour's pin held our mapping; its put freed it" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 1,0,0 ||
    log_since "nb-$site" | grep -E 'hook|dma_map_pages|neighbour|cudaFree|peermem' | sed 's/^/    /'
  check "... counted as the neighbour's harm (map_newer_neighbour_pin: $m0, then +1)" \
    test "$(gpu_get map_newer_neighbour_pin)" = "$((m0 + 1))"
  check "... not as a newer pin of ours (map_newer_pin stays $n0)" test "$(gpu_get map_newer_pin)" = "$n0"
done
check "no contract violation but the cascade's" sim_check put_released_other_pin=1 dma_after_free=1
check "no pins or DMA mappings left" \
  test "$(gpu_get pins),$(gpu_get persistent_pins),$(gpu_get mappings)" = 0,0,0
check "stats: nothing live, pinned or orphaned" \
  test "$(pm_stat live_registrations),$(pm_stat pinned_bytes),$(pm_stat orphaned_pins),$(pm_stat sg_tables)" = 0,0,0,0
check "stats: no unpin or unmap error" \
  test "$(pm_stat errors.unpin),$(pm_stat errors.dma_unmap)" = 0,0
check "sim_neighbour unloads" rmmod sim_neighbour
check "unload" pm_down

check "providers + $PM_MODULE mode=persistent" pm_up mode=persistent || finish
check "the same-process neighbour (sim_neighbour.ko)" insmod "$MODS/sim_neighbour.ko"
param nvidia_p2p_sim driver_reads 1
# The simulated driver reports the neighbour's put of our persistent
# table's address as a put of the wrong variant (bad_args, a WARN) and
# releases nothing; the real one finds no revocable pin there and answers 0.
sim_expect_warn
check "the neighbour's late put, then our registration's DMA check and deregistration" neighbour_race
check "... released no pin of ours (neighbour_released_pins=${NB_OTHER:-?})" test "${NB_OTHER:-x}" = 0
check "... our registration was DMA-checked" grep -qE '^dma_check handle=[0-9]+ ok' /tmp/nb.out
check "no contract violation but the neighbour's wrong-variant put" sim_check bad_args=1
check "no pins or DMA mappings left" \
  test "$(gpu_get pins),$(gpu_get persistent_pins),$(gpu_get mappings)" = 0,0,0
check "sim_neighbour unloads" rmmod sim_neighbour
check "unload" pm_down
finish
