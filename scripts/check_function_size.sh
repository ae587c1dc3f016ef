#!/usr/bin/env bash
# Holds every function of tuner/, strategies/, server/, tests/ and bench/
# to 150 lines: clang-tidy's readability-function-size with the threshold
# of the checked-in .clang-tidy, over the build's compile_commands.json.
#
#   scripts/check_function_size.sh [BUILD_DIR]    (default build/ci)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ci}
[ -f "$build/compile_commands.json" ] || { echo "check_function_size: no $build/compile_commands.json; build first" >&2; exit 2; }
tidy=$(command -v run-clang-tidy || command -v run-clang-tidy-14 || true)
[ -n "$tidy" ] || { echo "check_function_size: run-clang-tidy not found (apt-get install clang-tidy)" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$tidy" -p "$build" -j "$(nproc)" -quiet -checks='-*,readability-function-size' \
  "$PWD/(tuner|strategies|server|tests|bench)/" >"$log" 2>&1 || true
# Each finding is "FILE:LINE:COL: warning: function 'F' exceeds ... [readability-function-size]"
# (the command lines run-clang-tidy echoes name the check too, without brackets).
if grep -q "\[readability-function-size\]" "$log"; then
  grep -A2 "\[readability-function-size\]" "$log" | grep -v "^--$" >&2
  echo "check_function_size: functions over 150 lines (split them)" >&2
  exit 1
fi
echo "check_function_size: every function within 150 lines"
