#!/usr/bin/env bash
# Submits the construction of an index to Slurm: one job array of SHARDS tasks per per-document
# stage (each task runs its stage with --shard auto, i.e. on the buckets of task K of N), each
# array starting when the previous one has ended without error, then the merge as an array (the
# kb parts of each task's buckets) and a final job (the global parts: thresholds).
# Prints the job ids, one line per stage. Resubmitting after a failed or cancelled task redoes
# only the buckets that are not up to date (every stage is idempotent).
#
# Usage: cluster/slurm/submit.sh CORPUS INDEX SHARDS
# Environment (defaults in brackets): PARTITION [the cluster's default], ACCOUNT [none],
# CPUS [2] cpus per task, MEM [4G] memory per task, TIME [02:00:00] time limit per task,
# BIN [target/debug] folder of the stage binaries, CONFIG [none] pipeline configuration file,
# LOGS [INDEX/.slurm-logs, or ./.slurm-logs/<bucket_prefix> for an s3:// INDEX] the tasks' logs.
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
common=(--parsable --cpus-per-task="${CPUS:-2}" --mem="${MEM:-4G}" --time="${TIME:-02:00:00}")
[ -n "${PARTITION:-}" ] && common+=(--partition="$PARTITION")
[ -n "${ACCOUNT:-}" ] && common+=(--account="$ACCOUNT")
config=()
[ -n "${CONFIG:-}" ] && config=(--config "$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")")

# A task's command: the stage, with exit code 1 (units failed and recorded) counted as done.
task() {
  printf '%q ' "$@"
  printf '; rc=$?; [ $rc -le 1 ] || exit $rc'
}

previous=""
# The stages before the merge, in the order flexstruct-index runs them.
for stage in $("$bin/flexstruct-index" --list-stages --from ingest); do
  [ "$stage" = merge ] && break
  args=(--index "$index" --shard auto --quiet "${config[@]}")
  [ "$stage" = ingest ] && args+=(--corpus "$corpus")
  dependency=()
  [ -n "$previous" ] && dependency=(--dependency="afterok:$previous")
  previous=$(sbatch "${common[@]}" "${dependency[@]}" --array="0-$((shards - 1))" --job-name="fs-$stage" \
    --output="$logs/$stage-%a.log" --wrap="$(task "$bin/flexstruct-$stage" "${args[@]}")")
  echo "$stage $previous"
done
# The merge: each task builds the kb parts of its buckets, then one job derives the global parts.
previous=$(sbatch "${common[@]}" --dependency="afterok:$previous" --array="0-$((shards - 1))" --job-name=fs-merge \
  --output="$logs/merge-%a.log" \
  --wrap="$(task "$bin/flexstruct-merge" --index "$index" --shard auto --quiet "${config[@]}")")
echo "merge-shards $previous"
merge=$(sbatch "${common[@]}" --dependency="afterok:$previous" --job-name=fs-merge-final --output="$logs/merge.log" \
  --wrap="$(task "$bin/flexstruct-merge" --index "$index" --quiet "${config[@]}")")
echo "merge $merge"
