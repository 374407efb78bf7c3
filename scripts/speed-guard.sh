#!/usr/bin/env bash
# Speed guard (docs/PERFORMANCE.md "Speed guard"), run by .ci/run: in one
# minute on this machine, a flood of tiny declared jobs through the
# release binary with the default placement and with --placement pack,
# and the machine's own serial `sh -c true` spawn rate. Fails when the
# default falls under 0.5x pack or under 0.25x the spawn rate: loose
# enough for a loaded 2-core CI box, tight enough to catch a 4x
# regression (the rule that counted a GPU as computing flat out after
# every start ran the default at 0.2-0.4x pack on one GPU).
#
#   scripts/speed-guard.sh [BINARY] [JOBS]
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/gpusched}")
jobs=${2:-1000}
[ -x "$bin" ] || { echo "speed-guard: no binary at $bin (cargo build --release)"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq "$jobs"); do echo "[vram=100M] sleep 0.02 # $i"; done > "$work/jobs.txt"

# Jobs per second of one drain of the flood on one simulated GPU.
rate() {
  rm -rf "$work/logs"
  local s e
  s=$(date +%s%N)
  (cd "$work" && timeout 120 "$bin" jobs.txt --sim 1 --poll 2 --log-dir logs "$@" >/dev/null 2>&1)
  e=$(date +%s%N)
  echo $(( jobs * 1000000000 / (e - s + 1) ))
}
# The best of two runs each, interleaved, so a burst of load elsewhere
# hits both.
best() { if [ "$1" -gt "$2" ]; then echo "$1"; else echo "$2"; fi; }
d1=$(rate); p1=$(rate --placement pack); d2=$(rate); p2=$(rate --placement pack)
default=$(best "$d1" "$d2"); pack=$(best "$p1" "$p2")
s=$(date +%s%N)
for _ in $(seq 300); do sh -c true; done
e=$(date +%s%N)
spawn=$(( 300 * 1000000000 / (e - s + 1) ))
echo "speed guard: $jobs tiny declared jobs on --sim 1: default $default jobs/s, pack $pack jobs/s; serial sh -c true: $spawn/s"
fail=0
if [ $(( default * 2 )) -lt "$pack" ]; then
  echo "speed guard: FAILED: the default placement runs the flood at under 0.5x pack"; fail=1
fi
if [ $(( default * 4 )) -lt "$spawn" ]; then
  echo "speed guard: FAILED: the default placement runs the flood at under 0.25x this machine's spawn rate"; fail=1
fi
[ "$fail" = 0 ] && echo "speed guard: 1 passed, 0 failed" || echo "speed guard: 0 passed, 1 failed"
exit "$fail"
