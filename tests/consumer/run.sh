#!/usr/bin/env bash
# Installs ktune into a temporary prefix, builds the consumer project against
# it with find_package(ktune), tunes a recorded space with the installed
# ktune, and looks the result up through the installed client library.
#   tests/consumer/run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# The consumer is built as ktune was (a sanitizer build's library needs its
# runtime in the program that loads it).
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cmake -S "$src/tests/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_CXX_COMPILER="$(cache_value CMAKE_CXX_COMPILER)" \
  -DCMAKE_CXX_FLAGS="$(cache_value CMAKE_CXX_FLAGS)" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/prefix/bin/ktune" tune --local --max-evals 30 --db "$work/k.db" \
  --device "sim:$src/kernels/recorded/convolution_milo_A100.json.gz" >/dev/null 2>&1
device="NVIDIA A100-PCIE-40GB"
exact=$("$work/build/consumer" "$work/k.db" convolution_kernel "$device" \
  problem_size_x=4096 problem_size_y=4096)
echo "$exact"
grep -q '^match=exact key=[0-9,]* block_size_x=[0-9]' <<<"$exact"
near=$("$work/build/consumer" "$work/k.db" convolution_kernel "$device" \
  problem_size_x=2048 problem_size_y=2048)
echo "$near"
grep -q '^match=nearest_problem ' <<<"$near"
# The same configuration either way: the only problem tuned is the nearest.
[ "${exact#match=exact }" = "${near#match=nearest_problem }" ]
echo "consumer: ok"
