#!/usr/bin/env bash
# Submits the construction of an index to Slurm: one job array of SHARDS tasks per per-document
# stage (each task runs its stage with --shard auto, i.e. on the buckets of task K of N), each
# array starting when the previous one has ended without error, then the merge as an array (the
# kb parts of each task's buckets), a final job (the global parts: thresholds) and, with PATHS=1,
# the path index. Prints the job ids, one line per stage.
#
# Failures end cleanly: a task that fails cancels every job after it (--kill-on-invalid-dep), and
# a resubmission redoes only the buckets that are not up to date (every stage is idempotent). An
# index whose chain is still queued or running is refused, naming the jobs, unless REPLACE=1
# (which cancels them first). Tasks are requeueable (--requeue, for preemption) and get USR1
# SIGNAL_SECS before their time limit: the task then stops its stage cleanly (SIGTERM: finished
# buckets kept, the one in progress abandoned) and requeues itself, and the requeued task does the
# rest. (USR1 rather than TERM: a plain scancel sends TERM too, and must not requeue.)
#
# Usage: cluster/slurm/submit.sh CORPUS INDEX SHARDS
# Environment (defaults in brackets): PARTITION [the cluster's default], ACCOUNT [none],
# CPUS [2] cpus per task, MEM [4G] memory per task, TIME [02:00:00] time limit per task, each
# also per stage as CPUS_<STAGE>, MEM_<STAGE>, TIME_<STAGE> (CPUS_EMBED=8, MEM_MERGE=16G; PATHS
# for the path index), SIGNAL_SECS [120], PATHS [0], REPLACE [0],
# BIN [target/debug] folder of the stage binaries, CONFIG [none] pipeline configuration file,
# LOGS [INDEX/.slurm-logs, or ./.slurm-logs/<bucket_prefix> for an s3:// INDEX] the tasks' logs
# (appended to across requeues).
# INDEX may be s3://bucket/prefix: the AWS_* variables of the submitting shell reach the tasks
# (sbatch exports the environment).
# The stage binaries size their thread pools from the task's SLURM_CPUS_PER_TASK. Exit code 1 of
# a stage (some units failed; they are rows of the failures table, retried by a rerun) lets the
# next stage go on; any other failure stops the chain.
set -euo pipefail
corpus=${1:?usage: $0 CORPUS INDEX SHARDS}
index=${2:?usage: $0 CORPUS INDEX SHARDS}
shards=${3:?usage: $0 CORPUS INDEX SHARDS}
bin=$(cd "${BIN:-target/debug}" && pwd)
corpus=$(cd "$(dirname "$corpus")" && pwd)/$(basename "$corpus")
case "$index" in
  *://*)
    # An index on object storage (s3://bucket/prefix): every task works on its own working copy;
    # the logs go to a local folder (LOGS, default ./.slurm-logs/<bucket_prefix>).
    logs=${LOGS:-$(pwd)/.slurm-logs/$(printf '%s' "${index#*://}" | tr -c 'A-Za-z0-9._-' _)} ;;
  *)
    mkdir -p "$index"
    index=$(cd "$index" && pwd)
    logs=${LOGS:-$index/.slurm-logs} ;;
esac
mkdir -p "$logs"
. "$(dirname "$0")/chain.sh"
tag=$(chain_tag "$index")
queued=$(chain_jobs "$tag" | tr '\n' ' ')
if [ -n "$queued" ]; then
  if [ "${REPLACE:-0}" != 1 ]; then
    echo "slurm-index: the chain of $index is still queued or running (jobs ${queued% }): wait for it (make slurm-status INDEX=$index), or REPLACE=1 to cancel it and submit anew" >&2
    exit 1
  fi
  # shellcheck disable=SC2086
  scancel $queued
  for _ in $(seq 600); do [ -z "$(chain_jobs "$tag")" ] && break; sleep 0.5; done
fi
common=(--parsable --kill-on-invalid-dep=yes --requeue --signal="B:USR1@${SIGNAL_SECS:-120}" --open-mode=append)
[ -n "${PARTITION:-}" ] && common+=(--partition="$PARTITION")
[ -n "${ACCOUNT:-}" ] && common+=(--account="$ACCOUNT")
config=()
[ -n "${CONFIG:-}" ] && config=(--config "$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")")

# The resources of stage $1: CPUS_<STAGE> (MEM_, TIME_) over CPUS (MEM, TIME) over the defaults.
resources() {
  local suffix var
  suffix=$(printf '%s' "$1" | tr 'a-z-' 'A-Z_')
  var=CPUS_$suffix; printf -- '--cpus-per-task=%s ' "${!var:-${CPUS:-2}}"
  var=MEM_$suffix; printf -- '--mem=%s ' "${!var:-${MEM:-4G}}"
  var=TIME_$suffix; printf -- '--time=%s' "${!var:-${TIME:-02:00:00}}"
}

# A task's batch script: the stage in the background, so that the shell can pass it a signal.
# Exit code 1 (units failed and recorded) counts as done; USR1 (the time limit's warning) stops
# the stage cleanly and requeues the task; TERM or INT (scancel) stops it without a requeue.
task() {
  printf '%q ' "$@"
  cat <<'SCRIPT'
&
child=$!
requeue=0
trap 'requeue=1; kill -TERM "$child" 2>/dev/null' USR1
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
wait "$child"; rc=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
case $rc in
  0|1) exit 0 ;;
esac
if [ "$requeue" = 1 ] && { [ "$rc" = 143 ] || [ "$rc" = 130 ]; }; then
  echo "slurm-index: stopped before the time limit; requeueing job $SLURM_JOB_ID to do the rest"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
SCRIPT
}

# submit STAGE LABEL DEPENDENCY ARRAY COMMAND...: one job (an array of SHARDS tasks when ARRAY is
# 1), after DEPENDENCY (a job id, or empty); prints its id.
submit() {
  local stage=$1 label=$2 after=$3 array=$4
  shift 4
  local options=("${common[@]}")
  read -r -a more <<<"$(resources "$stage")"
  options+=("${more[@]}" --job-name="fs-$label@$tag")
  [ -n "$after" ] && options+=(--dependency="afterok:$after")
  if [ "$array" = 1 ]; then
    options+=(--array="0-$((shards - 1))" --output="$logs/$label-%a.log")
  else
    options+=(--output="$logs/$label.log")
  fi
  sbatch "${options[@]}" --wrap="$(task "$@")"
}

previous=""
# The stages before the merge, in the order flexstruct-index runs them.
for stage in $("$bin/flexstruct-index" --list-stages --from ingest); do
  [ "$stage" = merge ] && break
  args=(--index "$index" --shard auto --quiet "${config[@]}")
  [ "$stage" = ingest ] && args+=(--corpus "$corpus")
  previous=$(submit "$stage" "$stage" "$previous" 1 "$bin/flexstruct-$stage" "${args[@]}")
  echo "$stage $previous"
done
# The merge: each task builds the kb parts of its buckets, then one job derives the global parts.
previous=$(submit merge merge-shards "$previous" 1 "$bin/flexstruct-merge" --index "$index" --shard auto --quiet "${config[@]}")
echo "merge-shards $previous"
merge=$(submit merge merge "$previous" 0 "$bin/flexstruct-merge" --index "$index" --quiet "${config[@]}")
echo "merge $merge"
if [ -n "${PATHS:-}" ] && [ "$PATHS" != 0 ]; then
  paths=$(submit paths paths "$merge" 0 "$bin/flexstruct-paths" --index "$index" --quiet "${config[@]}")
  echo "paths $paths"
fi
