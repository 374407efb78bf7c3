#!/usr/bin/env bash
# How quickly `--enforce stop` catches a job that goes over its declaration
# (docs/BEHAVIOUR.md "Declarations that hold"): on one simulated GPU, N jobs
# declared 8G each wait 3 s (past the samples taken just after a start),
# then take 16000 MiB within 50 ms. For each, the time from the over-use
# to the journal's record of its stop (SIGTERM sent, the job gone) is
# measured; the script prints min, median and max.
#
# Usage: scripts/enforce-latency.sh [N] [--poll SEC]   (default N=10; the
# scheduler's default --poll otherwise). Uses target/release/gpusched
# (built if missing), or $GPUSCHED_BIN.
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${1:-10}"
shift || true
bin="${GPUSCHED_BIN:-$root/target/release/gpusched}"
[ -x "$bin" ] || (cd "$root" && cargo build --release --locked)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for i in $(seq "$n"); do
    echo "[vram=8G] sh -c 'sleep 3; exec gpusched simjob --vram 16000 --ramp 0.05 --hold 30' # $i"
done > "$work/jobs.txt"
"$bin" "$work/jobs.txt" --log-dir "$work/logs" --sim 1 --exclusive --enforce stop "$@" > "$work/out.txt" 2>&1 || true
python3 - "$work/logs/journal.jsonl" <<'PY'
import json, statistics, sys
started, latencies = {}, []
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] == "started":
        started[e["key"]] = e["ts"]
    elif e["event"] == "done" and e.get("status") in ("exceeded_declaration", "over_declared") and e["key"] in started:
        # Over its declaration 3 s after the start, at most 50 ms later.
        latencies.append(e["ts"] - started[e["key"]] - 3.0)
if not latencies:
    sys.exit("no job was stopped: see the scheduler's output")
print(f"{len(latencies)} over-uses caught; time from over-use to stop (s): "
      f"min {min(latencies):.2f}, median {statistics.median(latencies):.2f}, max {max(latencies):.2f}")
PY
