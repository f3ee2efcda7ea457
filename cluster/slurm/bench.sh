#!/usr/bin/env bash
# `make bench-slurm`: what scheduling costs. Each corpus is built into a fresh folder by
# flexstruct-index in one process, then through a one-node Slurm on this machine (set up and torn
# down as for `make slurm-test`) with 1, 2 and 4 array tasks per stage (CPUS=1 each), ROUNDS times
# in turn; prints the wall time of each (from submission until the last job has ended) and the
# medians, with the ratio to the one-process build. hashing-64 embeddings, so that the stages'
# own work is small and the scheduling shows.
#
# Usage: cluster/slurm/bench.sh CORPUS... (environment: ROUNDS [3], SHARD_COUNTS ["1 2 4"], BIN)
set -euo pipefail
bin=$(cd "${BIN:-target/debug}" && pwd)
rounds=${ROUNDS:-3}
shard_counts=${SHARD_COUNTS:-"1 2 4"}
[ $# -gt 0 ] || { echo "usage: $0 CORPUS..." >&2; exit 2; }
. cluster/slurm/local.sh
work=$(mktemp -d)
pids=()
trap stop_local_slurm EXIT
start_local_slurm
. cluster/slurm/chain.sh
export FLEXSTRUCT_EMBED__MODEL=hashing-64

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }
# Seconds until the chain of index $1 has no job left.
wait_chain() {
  local tag
  tag=$(chain_tag "$1")
  while [ -n "$(chain_jobs "$tag")" ]; do sleep 0.2; done
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-28s %-10s %s\n' corpus run "seconds (each round)"
for corpus in "$@"; do
  name=$(basename "$(dirname "$corpus")")/$(basename "$corpus")
  declare -A times=()
  for round in $(seq "$rounds"); do
    rm -rf "$work/single"
    start=$(now)
    "$bin/flexstruct-index" --index "$work/single" --corpus "$corpus" --quiet 2>"$work/single.log" \
      || { tail -n 20 "$work/single.log" >&2; exit 1; }
    times[single]+="$(since "$start") "
    for shards in $shard_counts; do
      index="$work/slurm-$shards"
      rm -rf "$index"
      start=$(now)
      BIN="$bin" CPUS=1 MEM=2G cluster/slurm/submit.sh "$corpus" "$index" "$shards" >"$work/jobs.txt"
      wait_chain "$index"
      merge=$(awk '$1 == "merge" { print $2 }' "$work/jobs.txt")
      scontrol show job "$merge" 2>/dev/null | grep -q 'JobState=COMPLETED' \
        || { tail -n 20 "$index"/.slurm-logs/*.log >&2; echo "bench-slurm: the chain of $index failed" >&2; exit 1; }
      times[$shards]+="$(since "$start") "
    done
  done
  single=$(echo "${times[single]}" | tr ' ' '\n' | grep . | median)
  for run in single $shard_counts; do
    med=$(echo "${times[$run]}" | tr ' ' '\n' | grep . | median)
    label=$([ "$run" = single ] && echo "one process" || echo "slurm ×$run")
    printf '%-28s %-12s median %7.1f s  (%s)  %.2f× one process\n' "$name" "$label" "$med" \
      "${times[$run]% }" "$(awk -v a="$med" -v b="$single" 'BEGIN { print a / b }')"
  done
  unset times
done
