#!/bin/bash
# plant-stale-put: negative control (tests/vm/selfcheck.list, never in
# suite.list): module-stale-put against peermem_plant_stale_put.ko, the
# module built with tests/plants/stale_put.patch (its puts bypass the pin/put
# gate).  It MUST fail: a late put releases the new pin.
export PM_MODULE=peermem_plant_stale_put
[ -f "${vmstage:-/peermem}/mods/$(uname -r)/$PM_MODULE.ko" ] || { echo "FAIL - $PM_MODULE.ko was not built"; exit 1; }
exec bash "${vmstage:-/peermem}/vm/cases/module-stale-put.sh"
