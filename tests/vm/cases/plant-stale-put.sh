#!/bin/bash
# plant-stale-put: negative control (tests/vm/selfcheck.list, never in
# suite.list): module-stale-put against peermem_plant_stale_put.ko, the
# module built with tests/plants/stale_put.patch (its fence compares a new
# pin's table with the late calls' addresses off by one byte: no pin is ever
# a suspect).  It MUST fail: a late put releases the new pin, which its
# registration maps and uses (put_released_other_pin).
export PM_MODULE=peermem_plant_stale_put
[ -f "${vmstage:-/peermem}/mods/$(uname -r)/$PM_MODULE.ko" ] || { echo "FAIL - $PM_MODULE.ko was not built"; exit 1; }
exec bash "${vmstage:-/peermem}/vm/cases/module-stale-put.sh"
