#!/usr/bin/env bash
# Runs every libFuzzer target of an asan build over its checked-in seed
# corpus (fuzz/corpus/TARGET, crash inputs kept there as regression cases)
# for a fixed number of executions. A crash, a leak or a timeout fails.
#   scripts/fuzz.sh [BUILD_DIR] [RUNS]      defaults: build/asan 20000
# New inputs found go to a scratch folder, not to the checked-in corpus;
# a crash's input is left in $KTUNE_FUZZ_ARTIFACTS (default: a temporary
# folder, printed) for you to add to fuzz/corpus/TARGET.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/asan}
runs=${2:-20000}
artifacts=${KTUNE_FUZZ_ARTIFACTS:-$(mktemp -d /tmp/ktune_fuzz_artifacts.XXXXXX)}
scratch=$(mktemp -d /tmp/ktune_fuzz_scratch.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizer/lsan.supp}
failed=()
printf '%-20s %10s %8s %10s %8s\n' target executions seeds corpus seconds
# Every target fuzz/CMakeLists.txt builds, each with its corpus: a target
# without seeds fails rather than being skipped.
targets=$(sed -n 's/^ktune_fuzz(\([a-z_]*\) .*/\1/p' fuzz/CMakeLists.txt)
[ -n "$targets" ] || { echo "fuzz: no targets in fuzz/CMakeLists.txt" >&2; exit 1; }
for target in $targets; do
  corpus=fuzz/corpus/${target%_fuzz}
  binary=$build/fuzz/$target
  [ -x "$binary" ] || { echo "fuzz: $binary not built (cmake --build --preset asan)" >&2; exit 1; }
  [ -n "$(ls -A "$corpus" 2>/dev/null)" ] || { echo "fuzz: $target has no seeds in $corpus" >&2; exit 1; }
  mkdir -p "$scratch/$target"
  seeds=$(find "$corpus" -type f | wc -l)
  start=$(date +%s)
  if "$binary" -runs="$runs" -timeout=20 -rss_limit_mb=2560 -seed=1 \
      -artifact_prefix="$artifacts/$target-" "$scratch/$target" "$corpus" \
      >"$scratch/$target.log" 2>&1; then
    size=$(find "$scratch/$target" "$corpus" -type f | wc -l)
    execs=$(sed -n 's/.*Done \([0-9]*\) runs.*/\1/p' "$scratch/$target.log" | tail -1)
    printf '%-20s %10s %8s %10s %8s\n' "$target" "${execs:-?}" "$seeds" "$size" \
      "$(( $(date +%s) - start ))"
  else
    echo "fuzz: $target failed; its log:" >&2
    tail -60 "$scratch/$target.log" >&2
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${failed[*]} failed; inputs in $artifacts" >&2
  exit 1
fi
rmdir "$artifacts" 2>/dev/null || true
