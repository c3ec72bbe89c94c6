#!/bin/bash
# perftest-big (issue 34, make perftest-big; never in suite.list): perftest
# --use_cuda with 1 GiB messages through peermem_rs's scatterlists, the
# sizes make test cannot afford under TCG (rxe moves a few tens of MiB/s
# there, and perftest sends at least 5 messages a run).  GPU memory on both
# sides (each buffer 2 GiB and 0x1234 bytes into its allocation, so off
# every 64 KiB boundary), the bytes checked by VA as in perftest-cuda:
# ib_write_bw and ib_read_bw in persistent mode, ib_write_bw in invalidate
# mode.  Needs a VM of 6 GiB (make perftest-big sets it).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/module-common.inc"
. "$CASES/perftest-common.inc"
perftest_prepare || finish
G=$((1 << 30))
# Each perftest run moves 5 GiB: its own time limit, not pt's 300 s.
export PT_TIMEOUT=${PT_TIMEOUT:-2400}
check "rxe0 on the soft RDMA device" soft_rdma_up || finish
for mode in persistent invalidate; do
  check "providers + peermem_rs mode=$mode" pm_up mode=$mode || finish
  regs=$(pm_stat registrations)
  pt_check "$mode: ib_write_bw 1 GiB, GPU on both sides, 0x1234 bytes in" \
    ib_write_bw "$G" gpu gpu 5 -- PEERMEM_CUDA_STANDIN_OFFSET=0x1234
  n=2
  if [ $mode = persistent ]; then
    pt_check "$mode: ib_read_bw 1 GiB, GPU on both sides, 0x1234 bytes in" \
      ib_read_bw "$G" gpu gpu 5 -- PEERMEM_CUDA_STANDIN_OFFSET=0x1234
    n=4
  fi
  check "$mode: peermem_rs served perftest's registrations ($(pm_stat registrations) >= $regs + $n)" \
    test "$(pm_stat registrations)" -ge $((regs + n))
  no_leaks
  check "$mode: unload" pm_down
done
check "soft RDMA device down" soft_rdma_down
finish
