#!/usr/bin/env bash
# The large SGEMM space's figures on one GPU, from a bundle
# (deploy/bundle.sh), run from the repository's root:
#
#   bench/sgemm_large_gpu.sh BUNDLE OUT STEP...
#
# Steps, in the order given:
#   first          process start to the first stored measurement, saxpy,
#                  one evaluation: cold compile caches (ktune's and the
#                  driver's), then warm ones (FIRST_RUNS of them, 5 unless
#                  set), alternating with BUNDLE/before/ktune when present
#                  (an earlier build, for a side-by-side figure, with its
#                  own ktune-worker beside it: the worker measures)
#   worker         the same with ktune-worker beside ktune against a copy
#                  of ktune in a folder without it (which runs its workers
#                  itself), alternating, warm caches, 12 runs each
#   auto SECONDS   kernels/sgemm_large.json with the default strategy and a
#                  time budget of SECONDS (compilation included, from
#                  empty compile caches, ktune's and the driver's), seed
#                  AUTO_SEED (0 unless set)
#   cublas         bench/cublas_bench: cuBLAS fp32 SGEMM beside auto's best
#   record SECONDS brute force over kernels/sgemm_large_slice.json for at
#                  most SECONDS (resumable: the store is OUT/record.db.gz,
#                  restored from there when present), then its Kernel Tuner
#                  cache OUT/sgemm_large_slice_H200.json.gz
# Everything a step prints goes to OUT/STEP.log too.
set -uo pipefail
bundle=${1:?usage: sgemm_large_gpu.sh BUNDLE OUT STEP...}
out=${2:?usage: sgemm_large_gpu.sh BUNDLE OUT STEP...}
shift 2
work=$(mktemp -d)
mkdir -p "$out"
run() { "$bundle/run.sh" "$@"; }
# A program by path (a copy outside the bundle), with the bundle's libraries.
run_path() { LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
ms_now() { echo $(($(date +%s%N) / 1000000)); }

# One saxpy job of one evaluation: "BIN start-to-exit MS first-stored MS".
first_run() {
  local bin=$1 cache=$2 db t0 t1 first
  db="$work/first_$RANDOM.db"
  # Builds from b36c8cc on print their steps with --timings.
  local extra=(--timings)
  # NVRTC's code generation is cached by the driver too (its compute
  # cache, ~/.nv/ComputeCache): a cold run gets an empty one of its own.
  mkdir -p "$cache/driver"
  t0=$(ms_now)
  local runner=run
  [[ $bin == */* ]] && runner=run_path
  KTUNE_CACHE_DIR=$cache CUDA_CACHE_PATH=$cache/driver $runner "$bin" tune kernels/saxpy.json \
    --local --device 0 --db "$db" \
    --max-evals 1 "${extra[@]}" >/dev/null 2>"$work/first.err"
  local rc=$?
  t1=$(ms_now)
  first=$(sed -n 's/.*first measurement stored at \([0-9]*\) ms.*/\1/p' "$work/first.err")
  echo "$bin rc=$rc start-to-exit $((t1 - t0)) ms first-stored ${first:--} ms"
  [ $rc -eq 0 ] || cat "$work/first.err"
}

step_first() {
  local runs=${FIRST_RUNS:-5} i order
  [[ $runs =~ ^[1-9][0-9]{0,2}$ ]] || { echo "first: FIRST_RUNS must be 1 to 999, not '$runs'" >&2; return 2; }
  local bins=(ktune)
  [ -x "$bundle/before/ktune" ] && bins+=("$bundle/before/ktune")
  for bin in "${bins[@]}"; do
    echo "cold cache: $(first_run "$bin" "$(mktemp -d)")"
  done
  first_run ktune "$work/warm" >/dev/null  # fills the warm cache
  for ((i = 1; i <= runs; i++)); do
    order=("${bins[@]}")
    ((i % 2 == 0 && ${#bins[@]} == 2)) && order=("${bins[1]}" "${bins[0]}")  # every other round
    for bin in "${order[@]}"; do echo "warm $i: $(first_run "$bin" "$work/warm")"; done
  done
  KTUNE_CACHE_DIR="$work/warm" CUDA_CACHE_PATH="$work/warm/driver" run ktune tune \
    kernels/saxpy.json --local --device 0 \
    --db "$work/last.db" --max-evals 1 --timings 2>&1 | grep timings
}

step_worker() {
  local solo="$work/solo/ktune"
  mkdir -p "$work/solo"
  cp "$bundle/bin/ktune" "$solo"
  first_run ktune "$work/warm" >/dev/null  # fills the warm cache
  for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
    if ((i % 2)); then
      echo "warm $i: $(first_run ktune "$work/warm")"
      echo "warm $i: $(first_run "$solo" "$work/warm")"
    else
      echo "warm $i: $(first_run "$solo" "$work/warm")"
      echo "warm $i: $(first_run ktune "$work/warm")"
    fi
  done
}

step_auto() {
  local seconds=$1 seed=${AUTO_SEED:-0}
  [[ $seed =~ ^[0-9]{1,18}$ ]] || { echo "auto: AUTO_SEED must be a number, not '$seed'" >&2; return 2; }
  # Compilation is part of the budget: nothing compiled by an earlier run
  # on this machine (ktune's cache or the driver's) may shorten it.
  mkdir -p "$work/auto_cache/driver"
  KTUNE_CACHE_DIR="$work/auto_cache" CUDA_CACHE_PATH="$work/auto_cache/driver" \
    run ktune tune kernels/sgemm_large.json --local --device 0 --db "$work/auto.db" \
    --max-seconds "$seconds" --seed "$seed" --json >"$out/auto.json"
  local job
  job=$(sed -n 's/.*"job_id": *"\([0-9a-f]*\)".*/\1/p' "$out/auto.json" | head -1)
  run ktune show "$job" --db "$work/auto.db" --json | gzip >"$out/auto_show.json.gz"
  cat "$out/auto.json"
}

step_cublas() {
  run cublas_bench --spec kernels/sgemm_large.json --db "$work/auto.db" --rounds 5 --launches 20
}

step_record() {
  local seconds=$1
  [ -f "$out/record.db.gz" ] && gunzip -c "$out/record.db.gz" >"$work/record.db"
  run ktune tune kernels/sgemm_large_slice.json --local --device 0 --db "$work/record.db" \
    --max-seconds "$seconds" --json >"$work/record.json"
  cat "$work/record.json"
  local job
  job=$(sed -n 's/.*"job_id": *"\([0-9a-f]*\)".*/\1/p' "$work/record.json" | head -1)
  run ktune export "$job" --db "$work/record.db" --format kernel-tuner \
    "$out/sgemm_large_slice_H200.json.gz"
  gzip -c "$work/record.db" >"$out/record.db.gz"
}

while [ $# -gt 0 ]; do
  step=$1
  shift
  case "$step" in
    first) step_first 2>&1 | tee "$out/first.log" ;;
    worker) step_worker 2>&1 | tee "$out/worker.log" ;;
    auto) step_auto "$1" 2>&1 | tee "$out/auto.log"; shift ;;
    cublas) step_cublas 2>&1 | tee "$out/cublas.log" ;;
    record) step_record "$1" 2>&1 | tee "$out/record.log"; shift ;;
    *) echo "sgemm_large_gpu.sh: unknown step $step" >&2; exit 2 ;;
  esac
done
