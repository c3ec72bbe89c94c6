#!/bin/bash
# plant-sg-merge: negative control (tests/vm/selfcheck.list, never in
# suite.list): module-data against peermem_plant_sg_merge.ko, the module
# built with tests/plants/sg_merge.patch, which merges a GPU page above a
# run's end into the run (>= for ==): two runs with a gap between them
# become one entry.
# It MUST fail: the data check has to catch the planted bug (wrong bytes, or
# the HCA's DMA faulting on memory that is not the registration's).
export PM_MODULE=peermem_plant_sg_merge
# The small registrations are enough to catch it.
export data_big=0
[ -f "${vmstage:-/peermem}/mods/$(uname -r)/$PM_MODULE.ko" ] || { echo "FAIL - $PM_MODULE.ko was not built"; exit 1; }
exec bash "${vmstage:-/peermem}/vm/cases/module-data.sh"
