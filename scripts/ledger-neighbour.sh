#!/usr/bin/env bash
# What a neighbour's hold on the ledger's lock costs a user (docs/SECURITY.md
# "Neighbours"): ten tiny declared jobs of one test user on a shared
# simulated box of 2 GPUs, run alone, with another test user holding an
# exclusive flock on the ledger's lock for the whole run, and with his FIFO
# in the lock's place. Prints each run's wall time and how many jobs
# ended ok (10 each). As root (it acts as gpusched-t-alice and
# gpusched-t-bob, made by the test suite or here).
#
# Usage: scripts/ledger-neighbour.sh [BIN]   (default target/release/gpusched)
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"

[ "$(id -u)" = 0 ] || { echo "ledger-neighbour: needs root (it acts as two test users)" >&2; exit 1; }
bin=$(realpath "${1:-target/release/gpusched}")
alice=gpusched-t-alice
bob=gpusched-t-bob
for u in $alice $bob; do
    id "$u" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$u"
done
work=$(mktemp -d)
holder=""
cleanup() {
    [ -n "$holder" ] && kill -- -"$holder" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
chmod 755 "$work"
"$bin" ledger init --sim-dir "$work/gpus" >/dev/null
lock=$work/gpus/ledger/lock

run() {
    local d start end ok
    d=$(mktemp -d -p "$work")
    chmod 755 "$d"
    for n in $(seq 10); do echo "[vram=100M] true $n"; done > "$d/jobs.txt"
    chown -R $alice "$d"
    start=$(date +%s.%N)
    (cd "$d" && timeout -s KILL 120 setpriv --reuid=$alice --regid=$alice --clear-groups \
        "$bin" jobs.txt --sim 2 --sim-dir "$work/gpus" --ledger "$work/gpus/ledger" >/dev/null 2>&1) \
        || echo "ledger-neighbour: the scheduler ended with $? ($1)"
    end=$(date +%s.%N)
    ok=$(grep -c '"status":"ok"' "$d/gpusched_logs/journal.jsonl" 2>/dev/null || true)
    printf 'ledger-neighbour: %-14s %6.3f s, %s of 10 ok\n' "$1" "$(echo "$end - $start" | bc)" "$ok"
}

run "alone"
[ -e "$lock" ] || install -m 644 /dev/null "$lock"
setsid setpriv --reuid=$bob --regid=$bob --clear-groups flock --exclusive "$lock" sleep 300 &
holder=$!
sleep 0.5
run "lock held"
kill -- -"$holder" 2>/dev/null || true
holder=""
rm -f "$lock"
mkfifo -m 644 "$lock"
chown $bob "$lock"
run "FIFO as lock"
