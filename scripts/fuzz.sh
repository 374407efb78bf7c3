#!/usr/bin/env bash
# Fuzzes the jobs-file parser and the journal replay with cargo-fuzz
# (libFuzzer), on the stable toolchain (no sanitizer; panics and aborts are
# what it finds).
#
#   scripts/fuzz.sh [SECONDS] [TARGET…]     # default: 60 s each, both targets
#
# Targets: jobs_file, journal_replay. Needs cargo-fuzz
# (`cargo install cargo-fuzz --locked`; the script installs it if missing).
# Crashes are saved under fuzz/artifacts/TARGET/; the corpus grows under
# fuzz/corpus/TARGET/ (both ignored by git). Prints one summary line per
# target: executions, seconds, and crashes found.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(jobs_file journal_replay)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cd fuzz
build_log="$(mktemp)"
if ! cargo fuzz build --sanitizer none >"$build_log" 2>&1; then
    echo "fuzz: the fuzz targets do not build:" >&2
    tail -n 40 "$build_log" >&2
    rm -f "$build_log"
    exit 1
fi
rm -f "$build_log"
status=0
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    log="$(mktemp)"
    if cargo fuzz run --sanitizer none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        crashes=0
    else
        crashes=1
        status=1
    fi
    execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
    echo "$target: $execs executions in $seconds s, crashes: $crashes"
    if [ "$crashes" != 0 ]; then
        tail -n 40 "$log"
    fi
    rm -f "$log"
done
exit "$status"
