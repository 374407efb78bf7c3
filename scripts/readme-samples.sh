#!/usr/bin/env bash
# Prints the README's sample screens from a real run of the bundled
# example: the terminal's lines, status.txt and `gpusched status` while
# it runs, `gpusched log -f` of the 2-GPU job, and the end-of-run summary.
# Usage: scripts/readme-samples.sh [DIR]   (DIR: where to run; a new
# temporary directory by default). Needs a release build.
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="$repo/target/release/gpusched"
dir="${1:-$(mktemp -d)}"
mkdir -p "$dir/examples"
cp "$repo/examples/jobs.txt" "$dir/examples/jobs.txt"
cd "$dir"
rm -rf gpusched_logs
"$bin" examples/jobs.txt --sim 2 > run.txt 2>&1 &
sched=$!
sleep 4
echo "=== status.txt after 4 s"
cat gpusched_logs/status.txt
echo "=== gpusched status after 4 s"
COLUMNS=80 "$bin" status
echo "=== gpusched log pair -f"
"$bin" log pair -f || echo "(exit $?)"
wait "$sched" || true
echo "=== the terminal"
cat run.txt
echo "=== gpusched timeline"
"$bin" timeline -o timeline.svg
