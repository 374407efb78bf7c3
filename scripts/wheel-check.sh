#!/usr/bin/env bash
# Builds the wheel that carries the gpusched binary (maturin, from PyPI,
# in a virtual environment of its own), installs it into a fresh virtual
# environment and runs the bundled example from there, as a user who
# only has Python would. Prints the wheel's size and the install time.
# Usage: scripts/wheel-check.sh [PROFILE]   (needs python3 with venv, and PyPI)
# PROFILE is a Cargo profile, `release` (the default: the wheel people
# install) or `dev` (CI: it reuses the binary the tests just built, stripped,
# so the packaging is checked without a second full build).
set -euo pipefail
# Hermetic (docs/DEVELOPMENT.md "Hermetic tests"): the host's own box
# rules do not apply to these runs unless GPUSCHED_BOX_RULES names a file.
export GPUSCHED_BOX_RULES="${GPUSCHED_BOX_RULES:-none}"
profile="${1:-release}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/build"
"$work/build/bin/pip" install --quiet "maturin>=1.7,<2"
# The same profile as `cargo build --profile "$profile"`: what is built
# already is reused.
(cd "$repo" && "$work/build/bin/maturin" build --profile "$profile" --strip --quiet --out "$work/dist")
wheel="$(ls "$work"/dist/gpusched-*.whl)"
echo "wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"
python3 -m venv "$work/fresh"
start=$(date +%s.%N)
"$work/fresh/bin/pip" install --quiet "$wheel"
end=$(date +%s.%N)
echo "install into a fresh venv: $(python3 -c "print(f'{$end - $start:.1f}')") s"
gpusched="$work/fresh/bin/gpusched"
"$gpusched" --version
cp "$repo/examples/jobs.txt" "$work/jobs.txt"
(cd "$work" && "$gpusched" jobs.txt --sim 2 --poll 0.5 > run.txt 2>&1) || {
  cat "$work/run.txt"
  echo "the example failed from the wheel's binary" >&2
  exit 1
}
grep "queue done" "$work/run.txt"
