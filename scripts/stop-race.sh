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
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
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

# 600 short jobs; each writes "<n> start <ns>" and, as its last act (the
# shell becomes date), "<n> end <ns>".
make_jobs() {
    local dir=$1 n
    : >"$dir/jobs.txt"
    for n in $(seq 1 600); do
        echo "[vram=200M] echo $n start \$(date +%s%N) >> $dir/marks; sleep 0.\$((RANDOM % 4 + 1)); exec date '+$n end %s%N' >> $dir/marks" >>"$dir/jobs.txt"
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

# One queue of 600 jobs under Ctrl-Cs until it is done or $1 Ctrl-Cs were
# sent; prints "SIGNALS HUNG RERUN_2MS RERUN_100MS NEVER".
storm() {
    local left=$1 dir signals=0 hung=0 pid t
    dir=$(mktemp -d)
    make_jobs "$dir"
    : >"$dir/signals"
    while [ "$signals" -lt "$left" ]; do
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
# at least MARGIN before the Ctrl-C that stopped its attempt's round (the
# first Ctrl-C after that attempt's start). The job takes its last
# timestamp, writes it and only then exits: on a loaded machine a kill can
# rightly reach it in between, so both 2 ms and 100 ms are counted.
def reruns(margin_ns):
    count = 0
    for n, e in ends.items():
        first_end = min(e)
        st = starts.get(n, [])
        began = max((s for s in st if s < first_end), default=None)
        stop = min((t for t in sig if began is not None and t > began), default=None)
        if any(s > first_end for s in st) and stop is not None and first_end + margin_ns <= stop:
            count += 1
    return count
never = sum(1 for n in map(str, range(1, 601)) if n not in ends)
print(count, hung, reruns(2_000_000), reruns(100_000_000), never)
EOF
    pkill -9 -f "$dir" 2>/dev/null || true
    rm -rf "$dir"
}

reruns() {
    local total=0 hung=0 rerun=0 rerun100=0 never=0 queues=0 s h r r100 n
    echo "== Ctrl-C storms over queues of 600 short jobs ($rounds Ctrl-Cs)"
    while [ "$total" -lt "$rounds" ]; do
        read -r s h r r100 n < <(storm $((rounds - total)))
        total=$((total + s)) hung=$((hung + h)) rerun=$((rerun + r)) rerun100=$((rerun100 + r100)) never=$((never + n))
        queues=$((queues + 1))
        echo "queue $queues: $s Ctrl-Cs, $h hung, finished jobs run again: $r (2 ms before the Ctrl-C), $r100 (100 ms), $n never finished"
    done
    awk -v c="$total" -v h="$hung" -v r="$rerun" -v r100="$rerun100" -v n="$never" 'BEGIN {
        d = c > 0 ? c : 1
        printf "Ctrl-Cs: %d, hung: %d, finished jobs run again: %d ended 2 ms before the Ctrl-C (%.1f per 100 Ctrl-Cs), %d ended 100 ms before (%.1f per 100), jobs never finished: %d\n", c, h, r, 100 * r / d, r100, 100 * r100 / d, n }'
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
    (for i in $(seq 1 2000); do echo "[vram=100M] true # appended $i" >>"$dir/jobs.txt"; sleep 0.002; done) &
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
