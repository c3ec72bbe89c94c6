#!/bin/bash
# nvpm-get-pages-race (control, must fail: the freed page table read): a
# cudaFree between the core's get_pages and dma_map (the core's hook).  The
# free callback comes before dma_map made a mapping: nvidia-peermem's
# returns early without invalidating (peermem.c:146-148), the driver frees
# the table, and nv_dma_map then reads it (page_table->page_size,
# peermem.c:246-250): a KASAN use-after-free on the debug kernel; on the
# others the simulated driver's poison (0x6b) is what the module reads and
# prints as the page-size id.  A correct client fails the registration
# without touching the freed table.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"

check "simulators (page tables v1) + NVIDIA's nvidia-peermem" nvpm_up || finish
log_mark nvpm-gp
check "cudaFree between get_pages and dma_map: ibv_reg_mr fails" \
  sim_run 'A=gpu alloc 2M; ! core reg $A 2M --hook after_get_pages:free; gpu get pins; gpu get allocations'
check "... nothing pinned or allocated" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 0,0
poisoned=$(log_since nvpm-gp | grep -E '1802201963|6b6b6b6b' | head -n 1)
if [ -n "$poisoned" ]; then
  bad "the client read the freed page table: the driver's poison reached it: $poisoned"
else
  ok "the client never read the freed page table"
fi
no_leaks
check "unload" pm_down
finish
