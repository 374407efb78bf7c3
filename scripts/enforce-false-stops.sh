#!/usr/bin/env bash
# `--enforce stop` must never stop an honest job (docs/BEHAVIOUR.md
# "Declarations that hold"). Runs, with --enforce stop on simulated GPUs:
#   1. the bundled example (examples/jobs.txt, --sim 2);
#   2. a mixed trace of N honest jobs (seeded): each declares D and peaks
#      anywhere from 30 % to 100 % of D, ramping fast or slowly, on 1 or 2
#      GPUs, beside undeclared jobs (--sim 4).
# and counts the jobs stopped for over-use; prints the counts and exits 1
# if any honest job was stopped.
#
# Usage: scripts/enforce-false-stops.sh [N] [SEED]   (default 40, 1). Uses
# target/release/gpusched (built if missing), or $GPUSCHED_BIN.
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${1:-40}"
seed="${2:-1}"
bin="${GPUSCHED_BIN:-$root/target/release/gpusched}"
[ -x "$bin" ] || (cd "$root" && cargo build --release --locked)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 - "$n" "$seed" > "$work/trace.txt" <<'PY'
import random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
for i in range(n):
    if rng.random() < 0.1:
        print(f"gpusched simjob --vram {rng.randint(1000, 8000)} --ramp 0.2 --hold {rng.uniform(0.5, 2):.1f} # {i}")
        continue
    declared = rng.choice([2000, 4000, 6000, 8000, 12000])
    peak = int(declared * rng.uniform(0.3, 1.0))
    gpus = 2 if rng.random() < 0.15 else 1
    ramp = rng.choice([0.05, 0.5, 2.0])
    print(f"[vram={declared} gpus={gpus}] gpusched simjob --vram {peak} --ramp {ramp} --hold {rng.uniform(0.5, 2.5):.1f} # {i}")
PY

stops=0
run() { # name, jobs file, args…
    local name="$1" jobs="$2"
    shift 2
    "$bin" "$jobs" --log-dir "$work/logs-$name" --enforce stop --poll 1 "$@" > "$work/out-$name.txt" 2>&1 || true
    local jobs_done stopped
    jobs_done=$(grep -c '"event":"done"' "$work/logs-$name/journal.jsonl" || true)
    stopped=$(grep -c '"exceeded_declaration"' "$work/logs-$name/journal.jsonl" || true)
    echo "$name: $jobs_done jobs ended, $stopped stopped for over-use"
    stops=$((stops + stopped))
}
run example "$root/examples/jobs.txt" --sim 2
run mixed "$work/trace.txt" --sim 4
[ "$stops" -eq 0 ] && echo "no honest job was stopped" || { echo "honest jobs were stopped" >&2; exit 1; }
