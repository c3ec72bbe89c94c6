#!/bin/bash
# nvpm-load (control, must pass): NVIDIA's nvidia-peermem loads against
# the simulators with its default parameters, registers its two clients
# (nv_mem: an _ex client asking for PEER_MEM_INVALIDATE_UNMAPS, with an
# invalidate slot; nv_mem_nc: a plain client without one) and unregisters
# both at rmmod (peermem.c:499-548, 570-579).
. "${vmstage:-/peermem}/vm/lib.sh"
. "$CASES/nvpm-common.inc"

check "simulators (page tables v1) + NVIDIA's nvidia-peermem" nvpm_up || finish
echo "info - $(modinfo -F version "$KO" 2> /dev/null | sed 's/^/nvidia-peermem version /')"
check "the driver hands out v1 page tables" test "$(param nvidia_p2p_sim pt_version)" = $((NVPM_PT_VERSION))
sim_run 'core stats' > /dev/null
check "two clients registered" has '^clients=2$'
check "nv_mem: _ex client, INVALIDATE_UNMAPS, with invalidation" has '^client name=nv_mem version=550[.0-9]+ ex_size=152 flags=0x1 invalidation=1 '
check "nv_mem_nc: plain client without invalidation" has '^client name=nv_mem_nc version=550[.0-9]+ ex_size=0 flags=0x0 invalidation=0 '
no_leaks
check "rmmod" rmmod_settled nvidia_peermem
sim_run 'core stats' > /dev/null
check "... unregistered both clients" has '^clients=0$'
check "unload" pm_down
finish
