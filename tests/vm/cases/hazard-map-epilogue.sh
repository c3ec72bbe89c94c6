#!/bin/bash
# hazard-map-epilogue: a negative control of the bench (tests/vm/selfcheck.list,
# never in suite.list), run in the debug kernel's controls boot.  A cudaFree
# during nvidia_p2p_dma_map_pages' epilogue (after the driver's lock, before
# it links the new mapping into the table's bookkeeping) frees that
# bookkeeping when the client's free callback does not wait for the map
# (simclient's does not, for a registration still in dma_map): the driver
# links the mapping into freed memory.  The simulated driver makes that write
# (driver_reads=1), and KASAN must report it, in the driver.  The case MUST
# fail for that report; the client's part (EINVAL, nothing pinned) is checked
# as in sim-races.
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/sim-common.inc"
CORE_PARAMS="honour_unmaps=1 sg_page_shift=0"
check "load the simulators (the driver's writes on)" sim_load driver_reads=1 || finish
check "load simclient_good" sim_client good
check "cudaFree in dma_map_pages' epilogue: the registration fails, nothing pinned" \
  sim_run 'A=gpu alloc 2M; gpu hook map_epilogue 1; !EINVAL core reg $A 2M; gpu get pins; gpu get orphan_mappings'
check "... (pins 0, the mapping orphaned)" test "$(grep -xE '[0-9]+' <<< "$SIM_OUT" | paste -sd,)" = 0,1
check "unload" sim_unload
finish
