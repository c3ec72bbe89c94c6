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
# built|cached SECONDS" lines, written by the preparation steps), along the
# foreground and along the background lane (PHASES' sixth field "lane"),
# which run side by side: the longer is the projection.  Warns when
# the run, or its projection, is over BENCH_BUDGET_MIN (45) minutes.
PHASES=$1 FRESH=$2 T0=$3 CPU=${4:-}
BUDGET_MIN=${BENCH_BUDGET_MIN:-45}
[ -s "$PHASES" ] || { echo "== phases: none recorded"; exit 0; }
[ -f "$FRESH" ] || FRESH=/dev/null
now=${PHASES_NOW:-$(date +%s)}   # (PHASES_NOW: bench-selftest.sh)
awk -F'\t' -v t0="$T0" -v now="$now" -v budget="$BUDGET_MIN" -v cpu="$CPU" -v cores="$(nproc)" '
  # Whether phase i may be on a chain of `kind`: "fg", the foreground (no
  # lane step); "lane", the background lane (its steps, and those that
  # ended before it began).
  function on(i, kind) {
    if (kind == "lane") return ln[i] || en[i] <= lane0 + 2
    return !ln[i]
  }
  # The chain back from phase `from` (ch[1..], returns its length): each
  # time the phase that ended last before the current one started (2 s of
  # slack).  X: what its cached steps cost beyond their time here when they
  # were built; U: its cached steps with no recorded build time.
  function walk(from, kind,    m, cur, best, i, k) {
    split("", used); m = 1; ch[1] = from; used[from] = 1; cur = from
    while (1) {
      best = 0
      for (i = 1; i <= n; i++) if (!used[i] && on(i, kind) && en[i] <= st[cur] + 2 && (!best || en[i] > en[best])) best = i
      if (!best) break
      # A cached step that ended with it (within the slack) took its whole
      # build in a fresh run, and then ended last: the one whose build took
      # longest is on the chain (a warm run restores the debug kernel in no
      # time, in the same second as the build of simctl).
      for (i = 1; i <= n; i++)
        if (!used[i] && on(i, kind) && en[i] <= st[cur] + 2 && en[i] >= en[best] - 2 && fk[lab[i]] == "cached" && fs[lab[i]] ~ /^[0-9]+$/ &&
            (fk[lab[best]] != "cached" || fs[lab[best]] !~ /^[0-9]+$/ || fs[lab[i]] + 0 > fs[lab[best]] + 0)) best = i
      ch[++m] = best; used[best] = 1; cur = best
    }
    X = 0; U = ""
    for (k = 1; k <= m; k++) {
      i = ch[k]
      if (fk[lab[i]] == "cached") { if (fs[lab[i]] ~ /^[0-9]+$/) X += fs[lab[i]] - (en[i] - st[i]); else U = U " " lab[i] }
    }
    return m
  }
  FILENAME == ARGV[1] { fk[$1] = $2; fs[$1] = $3; next }
  { n++; lab[n] = $1; st[n] = $2; en[n] = $3; rc[n] = $4; cs[n] = $5; ln[n] = ($6 == "lane") }
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
    # The last phase of the foreground (lf) and of the background lane
    # (ll), and when the lane began.
    lf = 0; ll = 0; lane0 = 0
    for (i = 1; i <= n; i++) {
      if (!ln[i] && (!lf || en[i] > en[lf])) lf = i
      if (ln[i] && (!ll || en[i] > en[ll])) ll = i
      if (ln[i] && (!lane0 || st[i] < lane0)) lane0 = st[i]
    }
    # The critical path: the chain of the phase that ended last.
    last = (ll && en[ll] > en[lf]) ? ll : lf
    m = walk(last, ln[last] ? "lane" : "fg")
    path = ""
    for (k = m; k >= 1; k--) { i = ch[k]; path = path (path == "" ? "" : " -> ") lab[i] sprintf(" (%.0f s)", en[i] - st[i]) }
    first = ch[m]
    # A fresh run: each chain with its cached steps at their build time;
    # the two run side by side, so the longer one is the projection.
    pf = 0; pl = 0; unknown = ""
    if (lf) { walk(lf, "fg"); pf = en[lf] - t0 + X; unknown = U }
    if (ll) { walk(ll, "lane"); pl = en[ll] - t0 + X; unknown = unknown U }
    wall = now - t0
    if (cpu != "")
      printf "CPU: %.1f min (user + system, every process of the run) on %d cores: %.1f min of wall at the least\n", cpu / 60, cores, cpu / 60 / cores
    printf "critical path: %s\n", path
    printf "the critical path'\''s phases took %.0f s of the run'\''s %d s (the rest: waits between them)\n", en[last] - st[first], wall
    if (pf > wall + 1 || pl > wall + 1 || unknown != "") {
      proj = (pf > pl ? pf : pl); if (proj < wall) proj = wall
      printf "warm run: %.1f min; a fresh run (empty cache) is projected at %.1f min%s%s\n", wall / 60, proj / 60, \
        (ll ? sprintf(" (the foreground %.1f, the background lane %.1f)", pf / 60, pl / 60) : ""), \
        (unknown != "" ? " plus the unrecorded build time of:" unknown : "")
    } else {
      proj = wall
      printf "fresh run (nothing on the critical path came from the cache): %.1f min\n", wall / 60
    }
    if (proj > budget * 60)
      printf "WARNING: %.1f min is over the %d-minute budget of a fresh make test (CI gives 90; see issue 31)\n", proj / 60, budget
  }' "$FRESH" "$PHASES"
