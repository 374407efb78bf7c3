#!/usr/bin/env bash
# A hostile host for the test suite (docs/DEVELOPMENT.md "Hermetic
# tests", "The Slurm test cluster"). The suite and its scripts must pass
# beside it, and leave it as it was:
#
#   scripts/hostile-host.sh install  # box rules of one GPU and one running
#                                    # job in /etc/gpusched/box.toml (what
#                                    # was there kept aside); decoy
#                                    # processes named munged, slurmd and
#                                    # slurmctld (another Slurm's daemons);
#                                    # a fingerprint of /etc/slurm
#   scripts/hostile-host.sh check    # fails if a decoy is gone, /etc/slurm
#                                    # changed or the hostile rules moved
#   scripts/hostile-host.sh restore  # stops the decoys (by pid), puts the
#                                    # rules file back exactly
#
# State lives in $GPUSCHED_HOSTILE_DIR (default /tmp/gpusched-hostile).
# Needs root; says so and does nothing otherwise.
set -euo pipefail

state="${GPUSCHED_HOSTILE_DIR:-/tmp/gpusched-hostile}"
etc=/etc/gpusched
rules=$etc/box.toml
kept=$state/box.toml.kept
hostile='[quota.default]
max_gpus = 1
max_running = 1'

die() { echo "hostile-host: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || { echo "hostile-host: not root, nothing put in place" >&2; exit 0; }

# A fingerprint of every file under /etc/slurm (names, modes, contents).
fingerprint() {
    if [ -d /etc/slurm ]; then
        find /etc/slurm -printf '%p %m %s\n' | sort
        find /etc/slurm -type f -exec sha256sum {} + | sort
    else
        echo "no /etc/slurm"
    fi
}

install() {
    mkdir -p "$state"
    if [ ! -d "$etc" ]; then
        mkdir -m 755 "$etc"
        touch "$state/made-etc"
    fi
    if [ -e "$rules" ] && [ ! -e "$kept" ]; then
        cp -p "$rules" "$kept"
    fi
    printf '%s\n' "$hostile" > "$rules.new"
    chmod 644 "$rules.new"
    mv "$rules.new" "$rules"
    # Another Slurm's daemons, as pgrep -x sees them: `sleep` under their
    # names, in a new session so that nothing of the suite's reaches them.
    : > "$state/decoys"
    for name in munged slurmd slurmctld; do
        cp /bin/sleep "$state/$name"
        setsid "$state/$name" 86400 </dev/null >/dev/null 2>&1 &
        echo "$name $!" >> "$state/decoys"
    done
    fingerprint > "$state/etc-slurm.before"
    echo "hostile-host: $rules says max_gpus = 1, max_running = 1; decoys $(tr '\n' ' ' < "$state/decoys")"
}

check() {
    local bad=""
    while read -r name pid; do
        # Alive, and not a zombie: a killed decoy not yet reaped keeps its
        # name in /proc.
        if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$name" ] \
            || [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then
            echo "hostile-host: the decoy $name (pid $pid) is gone: something stopped another Slurm's daemon" >&2
            bad=1
        fi
    done < "$state/decoys"
    if ! fingerprint | cmp -s - "$state/etc-slurm.before"; then
        echo "hostile-host: /etc/slurm changed:" >&2
        fingerprint | diff "$state/etc-slurm.before" - >&2 || true
        bad=1
    fi
    if [ "$(cat "$rules" 2>/dev/null)" != "$hostile" ]; then
        echo "hostile-host: $rules changed under the suite" >&2
        bad=1
    fi
    [ -z "$bad" ] || die "the host was not left as it was"
    echo "hostile-host: decoys alive, /etc/slurm unchanged, the hostile rules in place"
}

restore() {
    if [ -f "$state/decoys" ]; then
        while read -r name pid; do
            [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] && kill "$pid" 2>/dev/null || true
        done < "$state/decoys"
        rm -f "$state/decoys"
    fi
    rm -f "$rules"
    if [ -e "$kept" ]; then
        mv "$kept" "$rules"
    fi
    if [ -e "$state/made-etc" ]; then
        rm -f "$state/made-etc"
        rmdir "$etc" 2>/dev/null || true
    fi
}

case "${1:-}" in
    install) install ;;
    check) check ;;
    restore) restore ;;
    *) echo "usage: $0 install|check|restore" >&2; exit 2 ;;
esac
