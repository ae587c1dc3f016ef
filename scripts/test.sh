#!/usr/bin/env bash
# Builds ktune with warnings as errors and runs the whole CPU test suite,
# with the layering and size checks; then the same suite under
# AddressSanitizer + UBSan, every fuzz target for a fixed number of runs,
# and the threaded parts' tests under ThreadSanitizer (docs/reliability.md).
# Does its own set-up (Debian packages) first.
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --quick    the warnings-as-errors build and its tests only
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
scripts/setup.sh
start=$(date +%s)
phase() { echo "test.sh: $1 done at $(( $(date +%s) - start )) s" >&2; }
# The layering (includes point down the folders) and the size limits first:
# they take seconds.
scripts/check_layers.py
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci -j "$(nproc)"
phase "build and tests"
# No function over 150 lines (clang-tidy over the build; a few minutes).
scripts/check_function_size.sh build/ci
phase "function sizes"
[ "$quick" = 1 ] && exit 0
# clang, AddressSanitizer + UBSan: the whole CPU suite, then the fuzzers.
cmake --preset asan >/dev/null
cmake --build --preset asan
if ! ctest --preset asan -j "$(nproc)"; then
  # LeakSanitizer's tracer sometimes dies as a test process exits on a
  # loaded machine, after the test passed and before any leak check: when
  # every failure is that (scripts/lsan_tracer_crashes.py), those tests
  # run once more; any other failure fails the suite.
  scripts/lsan_tracer_crashes.py build/asan >&2 || exit 1
  echo "test.sh: LeakSanitizer's tracer crashed in the tests above; running them again" >&2
  ctest --preset asan --rerun-failed
fi
phase "AddressSanitizer + UBSan suite"
scripts/fuzz.sh build/asan "${KTUNE_FUZZ_RUNS:-20000}"
phase "fuzzing"
# clang, ThreadSanitizer: the tests of the threaded parts.
cmake --preset tsan >/dev/null
cmake --build --preset tsan
ctest --preset tsan -j "$(nproc)"
phase "ThreadSanitizer suite"
