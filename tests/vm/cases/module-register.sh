#!/bin/bash
# module-register: ibv_reg_mr of GPU memory through peermem_rs, in both
# modes: 64 KiB, 2 MiB and 1 GiB; the SG list the HCA sees checked against
# the simulated GPU's physical pages (contiguous runs -> one entry each);
# exactly one pin (get_pages) per registration; the HCA's DMA check; stats;
# a QP buffer in GPU memory (served in persistent mode, never offered in
# invalidate mode).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"

for mode in persistent invalidate; do
  echo "# mode=$mode"
  check "providers + peermem_rs mode=$mode" pm_up mode=$mode || finish
  pin_call=get_pages; pins=pins
  [ $mode = persistent ] && { pin_call=get_pages_persistent; pins=persistent_pins; }
  for spec in "64K contiguous" "2M contiguous" "2M fragmented:4" "2M shuffled" "1G contiguous"; do
    set -- $spec; len=$1; layout=$2
    before=$(gpu_get calls.$pin_call)
    check "$mode: register $len ($layout)" \
      sim_run "A=gpu alloc $len $layout; H=core reg \$A $len; core dma-check \$H; gpu stats; gpu get $pins; gpu get mappings; core dereg \$H; gpu get $pins; gpu get mappings" || continue
    after=$(gpu_get calls.$pin_call)
    check "$mode $len: exactly one $pin_call for the registration" test $((after - before)) = 1
    r=$(runs); n=$(nents 1)
    check "$mode $len $layout: one SG entry per physical run ($r runs, $n entries)" test -n "$r" -a "$n" = "$r"
    bytes=$(sg_total 1)
    check "$mode $len: the SG list covers the whole range ($bytes bytes)" test "$bytes" = "$(numfmt --from=iec "$len")"
    check "$mode $len: pinned and mapped once while registered, nothing after" \
      test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 1,1,0,0
  done
  # Stats against what was done: 5 registrations, all released.
  check "$mode: stats registrations=5 deregistrations=5 live=0 pinned_bytes=0" \
    test "$(pm_stat registrations),$(pm_stat deregistrations),$(pm_stat live_registrations),$(pm_stat pinned_bytes)" = 5,5,0,0
  check "$mode: coalescing counted (pages before > entries after)" \
    test "$(pm_stat sg_entries_before_coalescing)" -gt "$(pm_stat sg_entries_after_coalescing)"
  check "$mode: no errors counted" test -z "$(awk '/^errors\./ && $2 != 0' "$STATS")"
  # A QP/CQ/SRQ buffer or devx umem in GPU memory (what GPU-initiated
  # networking registers): the core makes it without IB_PEER_MEM_INVAL_SUPP
  # and asks no client that requires invalidation (ib_get_peer_client).  A
  # persistent client serves it; an invalidate-mode one is never asked, and
  # with no other client the registration fails (modinfo's `mode` says so).
  if [ $mode = persistent ]; then
    check "$mode: a QP buffer in GPU memory is served (pinned, the HCA's DMA checked)" \
      sim_run "A=gpu alloc 64K; H=core reg \$A 64K --qp; core dma-check \$H; gpu get persistent_pins; core dereg \$H; gpu free \$A"
    check "... one persistent pin while registered, one registration more counted" \
      test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,),$(pm_stat registrations)" = 1,6
  else
    check "$mode: a QP buffer in GPU memory is not offered to peermem_rs (EFAULT, the core counts it unclaimed)" \
      sim_run "A=gpu alloc 64K; core get regs_unclaimed; !EFAULT core reg \$A 64K --qp; core get regs_unclaimed; gpu free \$A"
    mapfile -t n < <(grep -xE '[0-9]+' <<< "$SIM_OUT")
    check "... unclaimed +1, no registration of peermem_rs" \
      test "$(( ${n[1]:-0} - ${n[0]:-0} )),$(pm_stat registrations)" = 1,5
  fi
  no_leaks
  check "unload" pm_down
done
finish
