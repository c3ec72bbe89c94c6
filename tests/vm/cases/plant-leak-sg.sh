#!/bin/bash
# plant-leak-sg: negative control (tests/vm/selfcheck.list, never in suite.list): the
# stress campaign against peermem_plant_leak_sg.ko, the module built with
# tests/plants/leak_sg.patch.  It MUST fail: the campaign has to
# catch the planted bug.
export STRESS_MODULE=peermem_plant_leak_sg
# The invalidating mode only: the one with free callbacks (and cheap on
# the debug kernel, where `make test` runs the negative controls).
export stress_modes=invalidate stress_ops=${stress_ops:-400} stress_failslab=${stress_failslab:-0}
[ -f "${vmstage:-/peermem}/mods/$(uname -r)/$STRESS_MODULE.ko" ] || { echo "FAIL - $STRESS_MODULE.ko was not built"; exit 1; }
exec bash "${vmstage:-/peermem}/vm/cases/stress-campaign.sh"
