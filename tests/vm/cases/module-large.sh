#!/bin/bash
# module-large (issue 8, defect 2): registrations far above what one
# kmalloc can hold per page: 40 GiB and 128 GiB (640K and 2M GPU pages; 8 GiB
# on the debug kernel), on the simulated GPU's sparse backing (no real pages,
# synthetic bus addresses), in both modes; the SG list must cover the range exactly, in
# the expected number of entries (the HCA's 2 GiB segment limit).  On the
# debug kernel also a 1 GiB registration while every page allocation of
# order >= 1 fails for the registering process (fail_page_alloc
# min-order=1), as under memory fragmentation.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

G=$((1 << 30))
for mode in invalidate persistent; do
  check "providers + peermem_rs mode=$mode" pm_up mode=$mode || finish
  # 40 and 128 GiB (640K and 2M GPU pages) take many minutes under KASAN:
  # the Debian kernels cover them; the debug kernel runs the same paths on
  # 8 GiB (128K GPU pages, still far above one kmalloc per page).
  big=40; sizes="40 128"; [ "$(debug_kernel)" = yes ] && { big=8; sizes=8; }
  for size in $sizes; do
    check "$mode: ${size} GiB registration (contiguous bus addresses)" \
      sim_run "A=gpu alloc ${size}G sparse; H=core reg \$A ${size}G --sg-max 8192; core dma-check \$H; core dereg \$H; gpu free \$A"
    check "... the SG list covers ${size} GiB" test "$(sg_total 1)" = $((size * G))
    check "... in $((size / 2)) entries of 2 GiB (the HCA's segment limit)" test "$(nents 1)" = $((size / 2))
  done
  check "$mode: $big GiB in runs of 256 MiB (a gap after every 4096 pages), 4 KiB in at both ends" \
    sim_run "A=gpu alloc ${big}G sparse:4096; H=core reg \$A+0x1000 $((big * G - 0x2000)) --sg-max 8192; core dma-check \$H; core dereg \$H; gpu free \$A"
  check "... $((big * 4)) entries" test "$(nents 1)" = $((big * 4))
  # The HCA's view: trimmed to 4 KiB pages, or whole 64 KiB pages on a core
  # in the page-shift regime.
  want=$((big * G - 0x2000)); [ "$(core_get sg_regime)" = page_shift ] && want=$((big * G))
  check "... covering the range as the core's SG regime maps it" test "$(sg_total 1)" = $want
  no_leaks
  check "unload" pm_down
done

F=/sys/kernel/debug/fail_page_alloc
if [ "$(debug_kernel)" = yes ] && [ -d $F ]; then
  check "providers + peermem_rs mode=invalidate" pm_up mode=invalidate || finish
  echo 0 > $F/verbose; echo 100 > $F/probability; echo -1 > $F/times
  echo 1 > $F/min-order; echo N > $F/ignore-gfp-wait; echo N > $F/ignore-gfp-highmem
  echo Y > $F/task-filter
  # Empty the slab caches' free lists: every kmalloc of a size whose slabs
  # are of order >= 1 then needs a new slab, and fails, whatever the cases
  # before this one left in them.
  for c in /sys/kernel/slab/*/shrink; do echo 1 > "$c"; done 2> /dev/null
  # simctl locks its memory first: a page fault of its own would read the
  # 9p root filesystem, whose order-7 buffers then fail (and wedge 9p).
  check "1 GiB registration while every allocation of order >= 1 fails for this process" \
    sim_run 'A=gpu alloc 1G sparse:16; mlockall; write /proc/self/make-it-fail 1; H=core reg $A 1G; write /proc/self/make-it-fail 0; core dma-check $H; core dereg $H; gpu free $A'
  echo 0 > $F/probability
  check "... 1024 entries (runs of 1 MiB)" test "$(nents 1)" = 1024
  no_leaks
  check "unload" pm_down
else
  echo "info - no fail_page_alloc here: the fragmentation part runs on the debug kernel"
fi
finish
