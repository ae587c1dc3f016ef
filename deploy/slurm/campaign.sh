#!/usr/bin/env bash
# A tuning campaign on a Slurm cluster: one array task per job file, each on
# one GPU of its node, tuning headless (`ktune tune --local`, no daemon) into
# a store of its own, then one job that merges the stores when every task has
# ended (finished or not: a task cut short leaves its measurements, and its
# job resumes when run again).
#
#   deploy/slurm/campaign.sh RESULTS_DIR SPEC.json [SPEC.json ...]
#
# Each task's store is a file of its own: SQLite must not be shared over a
# network file system. The merged store, RESULTS_DIR/campaign.db, is what
# ktuned (--db) or applications (BestConfigs::Open) then read. $KTUNE names
# the ktune to run (default: the bundle's, /opt/ktune/run.sh ktune); extra
# sbatch options go in $SBATCH_ARGS (partition, account, time limit).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 RESULTS_DIR SPEC.json [SPEC.json ...]" >&2; exit 2; }
results=$(realpath -m "$1")
shift
specs=()
for s in "$@"; do
  [ -f "$s" ] || { echo "$0: $s: no such job file" >&2; exit 2; }
  specs+=("$(realpath "$s")")
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export KTUNE=${KTUNE:-/opt/ktune/run.sh ktune}
mkdir -p "$results"
# shellcheck disable=SC2086 # SBATCH_ARGS holds several options
array=$(sbatch --parsable ${SBATCH_ARGS:-} --array="0-$((${#specs[@]} - 1))" \
  --output="$results/task-%a.log" "$here/tune-task.sbatch" "$results" "${specs[@]}")
# shellcheck disable=SC2086
merge=$(sbatch --parsable ${SBATCH_ARGS:-} --dependency="afterany:$array" \
  --job-name=ktune-merge --output="$results/merge.log" \
  --wrap="$KTUNE merge '$results'/task-*.db --db '$results/campaign.db'")
echo "tuning: array job $array (${#specs[@]} tasks); merging: job $merge -> $results/campaign.db"
