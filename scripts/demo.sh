#!/usr/bin/env bash
# Builds ktune and runs a real tuning job: on a machine with an NVIDIA GPU,
# the saxpy kernel of kernels/ over its 128 configurations; without one, a
# replay of a space recorded on an NVIDIA A100 (2D convolution, 4362
# configurations) with a budget of 200 evaluations. Every measurement goes
# to build/demo.db; then the best configuration is read back from it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default
ktune=build/default/server/ktune
db=build/demo.db
if "$ktune" devices >/dev/null 2>&1; then
  "$ktune" devices
  "$ktune" tune kernels/saxpy.json --local --device 0 --db "$db"
  echo
  "$ktune" best --db "$db" --kernel saxpy
else
  echo "(no GPU here: replaying a recorded A100 space)"
  "$ktune" tune --local \
    --device sim:kernels/recorded/convolution_milo_A100.json.gz \
    --max-evals 200 --seed 1 --db "$db"
  echo
  "$ktune" best --db "$db" --kernel convolution_kernel
fi
