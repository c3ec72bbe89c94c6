#!/bin/bash
# tests/bench/phases.sh PHASES FRESH T0 [CPU] -- the per-phase table that
# ends `make test` (issue 31): every step run.sh timed (PHASES: "LABEL START
# END RC CPU" lines, epoch seconds and the CPU seconds the step and its
# children used), from T0 (the run's start); the run's CPU time (CPU
# seconds, every process it waited for) against the cores; the critical path
# (the chain of phases, each starting when the one before it ended, that
# ends last: what the wall time waited on); and the projection of a fresh
# run (an empty ~/.cache/peermem-rs): on a warm run, each cached step on the
# critical path is counted at what it cost when it was built (FRESH: "LABEL
# built|cached SECONDS" lines, written by the preparation steps).  Warns when
# the run, or its projection, is over BENCH_BUDGET_MIN (45) minutes.
PHASES=$1 FRESH=$2 T0=$3 CPU=${4:-}
BUDGET_MIN=${BENCH_BUDGET_MIN:-45}
[ -s "$PHASES" ] || { echo "== phases: none recorded"; exit 0; }
[ -f "$FRESH" ] || FRESH=/dev/null
now=${PHASES_NOW:-$(date +%s)}   # (PHASES_NOW: bench-selftest.sh)
awk -F'\t' -v t0="$T0" -v now="$now" -v budget="$BUDGET_MIN" -v cpu="$CPU" -v cores="$(nproc)" '
  FILENAME == ARGV[1] { fk[$1] = $2; fs[$1] = $3; next }
  { n++; lab[n] = $1; st[n] = $2; en[n] = $3; rc[n] = $4; cs[n] = $5 }
  END {
    printf "\n== phases (seconds from the start; a step in the background overlaps others)\n"
    printf "%-36s %8s %8s %8s %8s  %s\n", "phase", "start", "end", "seconds", "cpu s", "cache"
    # in start order (insertion sort: a few dozen phases)
    for (i = 1; i <= n; i++) ord[i] = i
    for (i = 2; i <= n; i++) { j = i; while (j > 1 && st[ord[j-1]] > st[ord[j]]) { t = ord[j]; ord[j] = ord[j-1]; ord[j-1] = t; j-- } }
    for (k = 1; k <= n; k++) {
      i = ord[k]; c = (lab[i] in fk) ? fk[lab[i]] (fk[lab[i]] == "cached" ? " (built in " fs[lab[i]] " s)" : "") : ""
      printf "%-36s %8.1f %8.1f %8.1f %8s  %s\n", lab[i], st[i] - t0, en[i] - t0, en[i] - st[i], (cs[i] == "" ? "-" : cs[i]), c
    }
    # The critical path: from the phase that ended last, back through the
    # phase that ended last before each one started (2 s of slack).
    last = 0
    for (i = 1; i <= n; i++) if (!last || en[i] > en[last]) last = i
    m = 1; chain[1] = last; used[last] = 1; cur = last
    while (1) {
      best = 0
      for (i = 1; i <= n; i++) if (!used[i] && en[i] <= st[cur] + 2 && (!best || en[i] > en[best])) best = i
      if (!best) break
      # A cached step that ended with it (within the slack) took its whole
      # build in a fresh run, and then ended last: the one whose build took
      # longest is the critical path (a warm run restores the debug kernel
      # in no time, in the same second as the build of simctl).
      for (i = 1; i <= n; i++)
        if (!used[i] && en[i] <= st[cur] + 2 && en[i] >= en[best] - 2 && fk[lab[i]] == "cached" && fs[lab[i]] ~ /^[0-9]+$/ &&
            (fk[lab[best]] != "cached" || fs[lab[best]] !~ /^[0-9]+$/ || fs[lab[i]] + 0 > fs[lab[best]] + 0)) best = i
      chain[++m] = best; used[best] = 1; cur = best
    }
    path = ""; extra = 0; unknown = ""
    for (k = m; k >= 1; k--) {
      i = chain[k]; path = path (path == "" ? "" : " -> ") lab[i] sprintf(" (%.0f s)", en[i] - st[i])
      if (fk[lab[i]] == "cached") {
        if (fs[lab[i]] ~ /^[0-9]+$/) extra += fs[lab[i]] - (en[i] - st[i]); else unknown = unknown " " lab[i]
      }
    }
    wall = now - t0
    if (cpu != "")
      printf "CPU: %.1f min (user + system, every process of the run) on %d cores: %.1f min of wall at the least\n", cpu / 60, cores, cpu / 60 / cores
    printf "critical path: %s\n", path
    printf "the critical path'\''s phases took %.0f s of the run'\''s %d s (the rest: waits between them)\n", en[last] - st[chain[m]], wall
    if (extra > 0 || unknown != "") {
      proj = wall + (extra > 0 ? extra : 0)
      printf "warm run: %.1f min; a fresh run (empty cache) is projected at %.1f min%s\n", wall / 60, proj / 60, \
        (unknown != "" ? " plus the unrecorded build time of:" unknown : "")
    } else {
      proj = wall
      printf "fresh run (nothing on the critical path came from the cache): %.1f min\n", wall / 60
    }
    if (proj > budget * 60)
      printf "WARNING: %.1f min is over the %d-minute budget of a fresh make test (CI gives 90; see issue 31)\n", proj / 60, budget
  }' "$FRESH" "$PHASES"
