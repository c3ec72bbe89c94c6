#!/bin/bash
# plant-sg-shift: negative control (tests/vm/selfcheck.list, never in
# suite.list): module-data against peermem_plant_sg_shift.ko, the module built
# with tests/plants/sg_shift.patch, which shifts the middle SG entry's bus address by 4 KiB.
# It MUST fail: the data check has to catch the planted bug (wrong bytes, or
# the HCA's DMA faulting on memory that is not the registration's).
export PM_MODULE=peermem_plant_sg_shift
# The small registrations are enough to catch it.
export data_big=0
[ -f "${vmstage:-/peermem}/mods/$(uname -r)/$PM_MODULE.ko" ] || { echo "FAIL - $PM_MODULE.ko was not built"; exit 1; }
exec bash "${vmstage:-/peermem}/vm/cases/module-data.sh"
