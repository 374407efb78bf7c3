#!/usr/bin/env bash
# Debian's chromium and chromedriver, for the test that loads the
# `gpusched serve` page in a real headless browser (tests/it/box_view.rs).
# Installs them with apt when missing (needs root); says so and fails
# otherwise.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "browser-setup: chromium and chromium-driver are missing; as root: apt-get install chromium chromium-driver" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
