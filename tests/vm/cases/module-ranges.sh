#!/bin/bash
# module-ranges: what reaches the NVIDIA driver is always 64 KiB aligned and
# never wraps.  Unaligned ranges are rounded out (the HCA sees exactly the
# pages asked for); zero-length, overflowing, non-GPU and other processes'
# ranges are declined ("not mine"), never passed on unrounded.  What the
# HCA sees depends on the core's SG regime: cores that trim show exactly the
# CPU pages asked for; cores that set the umem page shift from
# get_page_size (older MLNX_OFED) show whole 64 KiB GPU pages.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
check "providers + peermem_rs (invalidate)" pm_up mode=invalidate || finish
regime=$(core_get sg_regime)
# seen TRIMMED WHOLE -- the bytes the HCA sees under this core's regime.
seen() { if [ "$regime" = page_shift ]; then echo $(($2)); else echo $(($1)); fi; }
echo "  core SG regime: $regime"

check "unaligned: VA+0x1234, 0x5000 bytes" \
  sim_run 'A=gpu alloc 1M contiguous; H=core reg $A+0x1234 0x5000; core dma-check $H; core dereg $H'
check "... the HCA sees [VA+0x1000, VA+0x7000) (trim) or [VA, VA+64K) (page shift)" \
  test "$(sg_total 1)" = "$(seen 0x6000 0x10000)"
check "unaligned across a 64 KiB boundary: VA+0xfff0, 0x20 bytes" \
  sim_run 'A=gpu alloc 1M contiguous; H=core reg $A+0xfff0 0x20; core dma-check $H; core dereg $H'
check "... one CPU page (trim) or one GPU page (page shift) on each side" \
  test "$(sg_total 1)" = "$(seen 0x2000 0x20000)"
# Zero-length and wrapping ranges: refused (by the core or by us), and
# nothing reaches the driver.
pins=$(gpu_get calls.get_pages)
check "zero length is refused" sim_run 'A=gpu alloc 1M; ! core reg $A 0'
check "an overflowing range is refused" sim_run '! core reg 0xffffffffffff0000 0x20000'
check "... neither reached the driver" test "$(gpu_get calls.get_pages)" = "$pins"
check "host memory (not a GPU VA) is declined" sim_run '!EFAULT core reg 0x10000000 0x10000'
check "a range past the end of an allocation is declined" sim_run 'A=gpu alloc 1M; !EFAULT core reg $A 2M'
# Another process's GPU memory: the VA is only valid in its own CUDA context.
"$SIMCTL" run 'gpu alloc 1M; sleep 3600000' > /tmp/owner.out 2>&1 & owner=$!
check "another process allocated GPU memory" wait_line /tmp/owner.out '^alloc va=' $owner || cat /tmp/owner.out
va=$(sed -nE 's/^alloc va=(0x[0-9a-f]+) .*/\1/p' /tmp/owner.out)
check "another process's GPU VA ($va) is declined" sim_run "!EFAULT core reg $va 1M"
check "... while its owner was alive" kill -0 $owner
kill $owner 2>/dev/null; wait $owner 2>/dev/null
check "declined acquires were counted" test "$(pm_stat declined_acquires)" -ge 3
check "no registration is left" test "$(pm_stat live_registrations)" = 0
no_leaks
check "unload" pm_down
finish
