#!/usr/bin/env bash
# Four schedulers, one ledger: how long each waits for the ledger lock
# when all of them decide at once (docs/PERFORMANCE.md "Ledger contention").
#
# Usage: scripts/ledger-contention.sh [JOBS_PER_SCHEDULER] [USER...]
#
# Each scheduler gets JOBS_PER_SCHEDULER jobs (default 300) of 5000 MiB
# and 0.2 s, four of which fill a GPU, on 4 shared simulated GPUs, under
# box rules with fair share on. Given
# user names (and run as root), scheduler i runs as USER i, so the lock
# is contended by several users; else all run as you. Prints, per
# scheduler, its wall time and its lock waits (count, median, 99th
# percentile, max, in ms) and whether any decided without the lock.
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"

jobs=${1:-300}
shift || true
users=("$@")
bin=${GPUSCHED_BIN:-target/release/gpusched}
[ -x "$bin" ] || cargo build --release --quiet
bin=$(realpath "$bin")
work=$(mktemp -d)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/etc" "$work/gpus"
chmod 1777 "$work/gpus"
printf '[fair_share]\nhalf_life = "1h"\n' >"$work/etc/box.toml"
if [ "$(id -u)" = 0 ]; then
    "$bin" ledger init --ledger "$work/ledger" >/dev/null
else
    mkdir -m 1777 "$work/ledger"
    echo "not root: the rules file must belong to root, so this runs without rules" >&2
fi

pids=()
for i in 0 1 2 3; do
    dir="$work/s$i"
    mkdir -p "$dir"
    for n in $(seq "$jobs"); do echo "[vram=5000] sleep 0.2 # $n"; done >"$dir/jobs.txt"
    args=("$dir/jobs.txt" --log-dir "$dir/logs" --sim 4 --sim-dir "$work/gpus"
        --ledger "$work/ledger" --poll 0.5)
    [ "$(id -u)" = 0 ] && args+=(--box-rules "$work/etc/box.toml")
    run=()
    if [ ${#users[@]} -gt $i ]; then
        chown -R "${users[$i]}" "$dir"
        run=(setpriv --reuid "${users[$i]}" --regid "${users[$i]}" --clear-groups)
    fi
    (
        start=$(date +%s.%N)
        env GPUSCHED_LOG=debug "${run[@]}" "$bin" "${args[@]}" >"$dir/out" 2>"$dir/err" || true
        end=$(date +%s.%N)
        echo "$start $end" >"$dir/wall"
    ) &
    pids+=($!)
done
wait "${pids[@]}"

for i in 0 1 2 3; do
    dir="$work/s$i"
    read -r start end <"$dir/wall"
    python3 - "$dir/err" "$start" "$end" "$i" "${users[$i]:-$(id -un)}" <<'PY'
import re, statistics, sys
err, start, end, i, user = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
text = open(err, encoding="utf-8", errors="replace").read()
waits = sorted(float(m) for m in re.findall(r"ledger lock taken in ([0-9.]+) ms", text))
without = text.count("deciding without it")
if waits:
    p99 = waits[min(len(waits) - 1, int(0.99 * len(waits)))]
    print(f"scheduler {i} ({user}): {end - start:.1f} s, {len(waits)} locks, "
          f"median {statistics.median(waits):.3f} ms, p99 {p99:.3f} ms, max {waits[-1]:.3f} ms, "
          f"decided without the lock {without} times")
else:
    print(f"scheduler {i} ({user}): {end - start:.1f} s, no lock taken (see {err})")
PY
done
