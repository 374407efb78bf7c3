#!/usr/bin/env bash
# Exactly once across `kill -9` of the scheduler (docs/BEHAVIOUR.md
# "Exactly once"): 1,500 short jobs on 8 simulated GPUs (64 at a time), the scheduler
# killed with SIGKILL six times while they run and started again each
# time, then run to the end. Each job writes its number when it starts;
# the script counts the numbers written more than once (must be 0) and
# those never written (must be 0).
#
# Usage: scripts/kill9-once.sh [JOBS] [KILLS]   (default 1500 6)
# GPUSCHED=path/to/gpusched picks the binary (default target/release).
# Exit 0 when every job ran exactly once.
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
cd "$(dirname "$0")/.."
BIN=${GPUSCHED:-$PWD/target/release/gpusched}
jobs=${1:-1500}
kills=${2:-6}
work=$(mktemp -d)
trap 'rm -rf "$work" 2>/dev/null || true' EXIT
cd "$work"
for i in $(seq 1 "$jobs"); do
    echo "[vram=3000] sh -c 'echo $i >> runs.txt; sleep 0.$((i % 4 + 1))'"
done > jobs.txt
: > runs.txt

run() { exec "$BIN" jobs.txt --sim 8 --poll 0.2 --log-dir "$work/logs" --no-ledger >> run.log 2>&1; }

for k in $(seq 1 "$kills"); do
    run &
    pid=$!
    # Kill it once a few more jobs have started than before.
    target=$(( $(wc -l < runs.txt) + jobs / (kills + 2) ))
    while [ "$(wc -l < runs.txt)" -lt "$target" ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "kill -9 number $k after $(wc -l < runs.txt) starts"
done
(run) || true

twice=$(sort -n runs.txt | uniq -d | wc -l)
ran=$(sort -nu runs.txt | wc -l)
never=$((jobs - ran))
echo "jobs: $jobs; kill -9 of the scheduler: $kills; ran twice: $twice; never ran: $never"
grep -E "error" run.log | head -5 || true
[ "$twice" -eq 0 ] && [ "$never" -eq 0 ]
