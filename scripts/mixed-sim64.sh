#!/usr/bin/env bash
# The mixed multi-GPU trace of docs/PERFORMANCE.md "Floods under the
# default, measured": JOBS seeded simjobs of 1-8 GPUs, 1-20 GB each, 0.2-1 s,
# drained on --sim 64 --poll 0.5 with the default placement and with
# --placement pack, one after the other, through the release binary.
#
#   scripts/mixed-sim64.sh [BINARY] [JOBS]
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/gpusched}")
jobs=${2:-2000}
[ -x "$bin" ] || { echo "mixed-sim64: no binary at $bin (cargo build --release)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A small linear congruential generator, so that every run drains the
# same trace.
seed=12345
next() { seed=$(( (seed * 1103515245 + 12345) % 2147483648 )); echo $(( seed / 65536 % $1 )); }
for i in $(seq "$jobs"); do
  gpus=$(( $(next 8) + 1 )); gb=$(( $(next 20) + 1 )); ms=$(( $(next 800) + 200 ))
  secs=$(printf '%d.%03d' $(( ms / 1000 )) $(( ms % 1000 )))
  echo "[vram=${gb}G gpus=$gpus] gpusched simjob --vram $(( gb * 1000 - 500 )) --ramp 0.05 --hold $secs # $i"
done > "$work/jobs.txt"
for placement in spread pack; do
  s=$(date +%s%N)
  (cd "$work" && PATH="$(dirname "$bin"):$PATH" timeout 1200 "$bin" jobs.txt --sim 64 --poll 0.5 \
    --log-dir "logs-$placement" --placement "$placement" >/dev/null 2>&1)
  e=$(date +%s%N)
  echo "mixed-sim64: $jobs jobs, --placement $placement: $(( (e - s) / 1000000 )) ms"
done
