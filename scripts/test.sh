#!/usr/bin/env bash
# Builds ktune with warnings as errors and runs the whole CPU test suite.
# Does its own set-up (Debian packages) first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci -j "$(nproc)"
