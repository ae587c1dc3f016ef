#!/usr/bin/env bash
# Builds ktune with warnings as errors and runs the whole CPU test suite,
# with the layering and size checks. Does its own set-up (Debian packages)
# first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The layering (includes point down the folders) and the size limits first:
# they take seconds.
scripts/check_layers.py
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci -j "$(nproc)"
# No function over 150 lines (clang-tidy over the build; a few minutes).
scripts/check_function_size.sh build/ci
