#!/bin/bash
# plant-sg-phys: negative control of the IOMMU configuration
# (tests/vm/iommu-controls.list, never in suite.list): module-data against
# peermem_plant_sg_phys.ko, the module built with tests/plants/sg_phys.patch,
# which hands the HCA the page table's physical addresses instead of the
# DMA mapping's.  Without an IOMMU they are the same addresses and it
# passes; behind QEMU's VT-d it MUST fail: the HCA's DMA to an address its
# IOMMU has nothing mapped at faults instead of reaching the GPU.
export PM_MODULE=peermem_plant_sg_phys
# The small registrations are enough to catch it.
export data_big=0
[ -f "${vmstage:-/peermem}/mods/$(uname -r)/$PM_MODULE.ko" ] || { echo "FAIL - $PM_MODULE.ko was not built"; exit 1; }
exec bash "${vmstage:-/peermem}/vm/cases/module-data.sh"
