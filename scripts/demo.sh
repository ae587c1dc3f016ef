#!/usr/bin/env bash
# Builds ktune and runs a real tuning job. Without a GPU it replays a space
# recorded on an NVIDIA A100 (2D convolution, 4362 configurations) through
# the default strategy with a budget of 200 evaluations, stores every
# measurement in build/demo.db, and queries the best configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default
ktune=build/default/server/ktune
db=build/demo.db
"$ktune" tune --local \
  --device sim:kernels/recorded/convolution_milo_A100.json.gz \
  --max-evals 200 --seed 1 --db "$db"
echo
"$ktune" best --db "$db" --kernel convolution_kernel
