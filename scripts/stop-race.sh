#!/usr/bin/env bash
# Measures the exactly-once promises that a stop can break, as a user would
# see them (docs/BEHAVIOUR.md "Exactly once"):
#
#   stop-time   Ctrl-C with ~500 short jobs in flight: seconds from the
#               signal to the scheduler's exit (capped at 60 s, then kill -9).
#   reruns      repeated Ctrl-Cs over 600 short jobs until all are done: how
#               many jobs that had finished before a Ctrl-C ran again, per
#               100 Ctrl-Cs (judged by the timestamps the jobs write).
#   appends     2,000 `echo … >> jobs.txt` racing `gpusched cancel`: how many
#               appended lines the file kept.
#
# Usage: scripts/stop-race.sh [stop-time|reruns|appends|all] [ROUNDS]
# GPUSCHED=path/to/gpusched picks the binary (default target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${GPUSCHED:-$PWD/target/release/gpusched}
what=${1:-all}
rounds=${2:-20}
now_ns() { date +%s%N; }

# Waits up to $2 seconds for pid $1 to exit; prints the seconds it took,
# or "hung" after kill -9.
wait_exit() {
    local pid=$1 limit=$2 t0 t1
    t0=$(now_ns)
    while kill -0 "$pid" 2>/dev/null; do
        t1=$(now_ns)
        if (((t1 - t0) / 1000000 > limit * 1000)); then
            kill -9 "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            echo hung
            return
        fi
        sleep 0.01
    done
    wait "$pid" 2>/dev/null || true
    t1=$(now_ns)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", (b - a) / 1e9 }'
}

# 600 short jobs; each writes "<n> start <ns>" and "<n> end <ns>".
make_jobs() {
    local dir=$1 n
    : >"$dir/jobs.txt"
    for n in $(seq 1 600); do
        echo "[vram=200M] echo $n start \$(date +%s%N) >> $dir/marks; sleep 0.\$((RANDOM % 4 + 1)); echo $n end \$(date +%s%N) >> $dir/marks" >>"$dir/jobs.txt"
    done
}

stop_time() {
    local dir i t
    echo "== Ctrl-C with hundreds of jobs in flight: seconds to exit"
    for i in $(seq 1 "$rounds"); do
        dir=$(mktemp -d)
        make_jobs "$dir"
        "$BIN" "$dir/jobs.txt" --sim 4 --log-dir "$dir/logs" --poll 0.2 >"$dir/out" 2>&1 &
        local pid=$!
        # Wait until the first round has started hundreds of jobs.
        for _ in $(seq 1 300); do
            [ "$(grep -c start "$dir/marks" 2>/dev/null || echo 0)" -ge 300 ] && break
            sleep 0.01
        done
        kill -INT "$pid"
        t=$(wait_exit "$pid" 60)
        local open
        open=$(grep -c '"started"' "$dir/logs/journal.jsonl" || true)
        echo "round $i: $t s (started events: $open; $(grep -o 'stopping [0-9]* running' "$dir/out" | head -1))"
        pkill -9 -f "$dir" 2>/dev/null || true
        rm -rf "$dir"
    done
}

reruns() {
    local dir signals=0 hung=0 pid t
    dir=$(mktemp -d)
    make_jobs "$dir"
    : >"$dir/signals"
    echo "== Ctrl-C storm over 600 short jobs ($rounds Ctrl-Cs at most)"
    while [ "$signals" -lt "$rounds" ]; do
        "$BIN" "$dir/jobs.txt" --sim 4 --log-dir "$dir/logs" --poll 0.2 >>"$dir/out" 2>&1 &
        pid=$!
        sleep "0.$((RANDOM % 9 + 1))"
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" || true
            break
        fi
        now_ns >>"$dir/signals"
        kill -INT "$pid" 2>/dev/null || true
        signals=$((signals + 1))
        t=$(wait_exit "$pid" 60)
        [ "$t" = hung ] && hung=$((hung + 1))
    done
    # Run to the end without signals.
    "$BIN" "$dir/jobs.txt" --sim 4 --log-dir "$dir/logs" --poll 0.2 >>"$dir/out" 2>&1 || true
    python3 - "$dir/marks" "$dir/signals" "$signals" "$hung" <<'EOF'
import sys
marks, signals, count, hung = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sig = sorted(int(l) for l in open(signals) if l.strip())
ends, starts = {}, {}
for line in open(marks):
    parts = line.split()
    if len(parts) != 3:
        continue
    n, what, ts = parts[0], parts[1], int(parts[2])
    (ends if what == "end" else starts).setdefault(n, []).append(ts)
# A job re-ran after finishing if it started again after an end that came
# at least 2 ms before some Ctrl-C.
rerun = 0
for n, e in ends.items():
    first_end = min(e)
    if any(s > first_end for s in starts.get(n, [])) and any(first_end + 2_000_000 <= t for t in sig):
        rerun += 1
never = [n for n in map(str, range(1, 601)) if n not in ends]
print(f"Ctrl-Cs: {count}, hung: {hung}, finished jobs run again: {rerun} "
      f"({100 * rerun / max(count, 1):.1f} per 100 Ctrl-Cs), jobs never finished: {len(never)}")
EOF
    pkill -9 -f "$dir" 2>/dev/null || true
    rm -rf "$dir"
}

appends() {
    local dir i n
    dir=$(mktemp -d)
    echo "[vram=100M] sleep 30 # base" >"$dir/jobs.txt"
    for i in $(seq 1 50); do echo "[vram=100M] sleep 30 # c$i" >>"$dir/jobs.txt"; done
    "$BIN" "$dir/jobs.txt" --sim 1 --log-dir "$dir/logs" --watch >"$dir/out" 2>&1 &
    local pid=$!
    sleep 1
    echo "== 2000 appends racing cancels"
    (for i in $(seq 1 2000); do echo "[vram=100M] true # appended $i" >>"$dir/jobs.txt"; done) &
    local appender=$!
    n=0
    while kill -0 "$appender" 2>/dev/null; do
        "$BIN" cancel $((n % 50 + 2)) --log-dir "$dir/logs" >/dev/null 2>&1 || true
        n=$((n + 1))
    done
    wait "$appender"
    echo "cancels: $n, appended lines kept: $(grep -c '# appended' "$dir/jobs.txt") of 2000"
    kill -INT "$pid" 2>/dev/null || true
    wait_exit "$pid" 30 >/dev/null
    pkill -9 -f "$dir" 2>/dev/null || true
    rm -rf "$dir"
}

case $what in
stop-time) stop_time ;;
reruns) reruns ;;
appends) appends ;;
all) stop_time && reruns && appends ;;
*) echo "usage: $0 [stop-time|reruns|appends|all] [ROUNDS]" >&2; exit 2 ;;
esac
