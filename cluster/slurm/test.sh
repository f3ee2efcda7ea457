#!/usr/bin/env bash
# The Slurm test of `make test`: on a one-node Slurm that this script sets up and tears down,
# `make slurm-index SHARDS=4` must build the sample corpus into the same kb as `make index` — also
# after what clusters do: a task that fails (the jobs after it are cancelled, not left pending;
# fixed and resubmitted, the chain converges), a resubmission while the chain is queued (refused,
# naming the jobs), a chain cancelled with scancel and resubmitted, and a task warned of its time
# limit (USR1: its stage stops cleanly, the task requeues itself and the rerun does the rest).
# Installs slurm-wlm and munge from Debian when missing (as root), writes a slurm.conf for this
# host into a temporary folder, starts munged (unless one runs), slurmctld and slurmd, submits,
# waits for the jobs, compares every kb table, and stops the daemons it started (by pid).
set -euo pipefail
bin=${BIN:-target/debug}
. cluster/slurm/local.sh
work=$(mktemp -d)
pids=()
trap stop_local_slurm EXIT
start_local_slurm

export FLEXSTRUCT_EMBED__MODEL=hashing-64
. cluster/slurm/chain.sh
echo "slurm-test: single-process build"
make --no-print-directory index CORPUS=data/sample/corpus INDEX="$work/single" >/dev/null 2>&1

# Waits until the chain of index $1 has no job queued or running (at most $2 seconds).
wait_chain() {
  local tag
  tag=$(chain_tag "$1")
  for _ in $(seq $(($2 * 2))); do
    [ -z "$(chain_jobs "$tag")" ] && return 0
    sleep 0.5
  done
  echo "slurm-test: the chain of $1 still has jobs after $2 s:" >&2
  squeue >&2
  return 1
}

# Checks that the merge job of the chain whose ids are in $2 completed and that index $1 holds
# the kb of index $3.
same_kb() {
  local merge state
  merge=$(awk '$1 == "merge" { print $2 }' "$2")
  state=$(scontrol show job "$merge" 2>/dev/null | grep -o 'JobState=[A-Z]*' || true)
  if [ "$state" != "JobState=COMPLETED" ]; then
    echo "slurm-test: the merge job of $1 ended as $state" >&2
    tail -n 20 "$1"/.slurm-logs/*.log "$work/slurmctld.log" >&2 || true
    exit 1
  fi
  for table in entities hyperedges edges chunks hyperedge_entities clusters cluster_members aliases doc_stats thresholds; do
    q="SELECT * FROM kb.$table"
    if ! diff <("$bin/flexstruct-sql" --index "$3" --format csv "$q" | sort) <("$bin/flexstruct-sql" --index "$1" --format csv "$q" | sort) >/dev/null; then
      echo "slurm-test: kb.$table of $1 differs from that of $3" >&2
      exit 1
    fi
  done
}

submit() {
  make --no-print-directory slurm-index CORPUS=data/sample/corpus INDEX="$1" SHARDS=4 CPUS=1 MEM=500M "${@:3}" >"$2"
}

echo "slurm-test: make slurm-index SHARDS=4"
submit "$work/slurm" "$work/jobs.txt"
cat "$work/jobs.txt"
wait_chain "$work/slurm" 300
same_kb "$work/slurm" "$work/jobs.txt" "$work/single"
echo "slurm-test: the kb built by 4 Slurm array tasks per stage equals the single-process one"

echo "slurm-test: a task that fails"
# One documents part of an ingested index damaged: the ingest task of its shard stops (exit 2).
fail=$work/fail
"$bin/flexstruct-ingest" --index "$fail" --corpus data/sample/corpus --quiet
damaged=$(ls "$fail"/documents/part-*.parquet | head -n 1)
head -c 100 "$damaged" >"$work/truncated" && cp "$work/truncated" "$damaged"
submit "$fail" "$work/fail-jobs.txt"
# The jobs after the failed task are cancelled (--kill-on-invalid-dep), not left pending for ever.
wait_chain "$fail" 120
if ! grep -l "hint: this part's documents cannot be read" "$fail"/.slurm-logs/ingest-*.log >/dev/null; then
  echo "slurm-test: no ingest task reported the damaged part" >&2
  exit 1
fi
make --no-print-directory slurm-status INDEX="$fail" >"$work/fail-status.txt" 2>&1 || true
grep -q "damaged: $damaged" "$work/fail-status.txt" || { cat "$work/fail-status.txt" >&2; echo "slurm-test: slurm-status does not name the damaged part" >&2; exit 1; }
# Fixed as the hint says and resubmitted: the chain converges to the same kb.
mv "$damaged" "$work/damaged-part"
submit "$fail" "$work/fail-jobs.txt"
wait_chain "$fail" 300
same_kb "$fail" "$work/fail-jobs.txt" "$work/single"
echo "slurm-test: the failed task cancelled the chain after it; fixed and resubmitted, the kb is the same"

echo "slurm-test: a resubmission while the chain is queued, and a chain cancelled midway"
cancel=$work/cancel
submit "$cancel" "$work/cancel-jobs.txt"
if submit "$cancel" "$work/again.txt" 2>"$work/again.err"; then
  echo "slurm-test: a second chain of one index was submitted beside the first" >&2
  exit 1
fi
grep -q "is still queued or running (jobs " "$work/again.err" || { cat "$work/again.err" >&2; exit 1; }
# shellcheck disable=SC2046
scancel $(chain_jobs "$(chain_tag "$cancel")")
wait_chain "$cancel" 60
submit "$cancel" "$work/cancel-jobs.txt"
wait_chain "$cancel" 300
same_kb "$cancel" "$work/cancel-jobs.txt" "$work/single"
echo "slurm-test: the refused resubmission named the queued jobs; cancelled and resubmitted, the kb is the same"

echo "slurm-test: a task warned of its time limit"
# A slow embedding endpoint (the stand-in, 300 ms an answer, two texts a request, one request at
# a time) keeps the embed tasks running long enough to be signalled; the reference is built with
# the same endpoint (eight requests at a time: the vectors do not depend on it).
"$bin/flexstruct-standin-llm" --latency-ms 300 --url-file "$work/standin-url" 2>/dev/null &
pids+=("$!")
for _ in $(seq 100); do [ -s "$work/standin-url" ] && break; sleep 0.1; done
export FLEXSTRUCT_EMBED__MODEL=standin-embeddings FLEXSTRUCT_EMBED__BASE_URL
FLEXSTRUCT_EMBED__BASE_URL=$(cat "$work/standin-url")
export FLEXSTRUCT_EMBED__API_KEY_ENV="" FLEXSTRUCT_EMBED__BATCH_SIZE=2 FLEXSTRUCT_EMBED__MAX_CONCURRENCY=1
FLEXSTRUCT_EMBED__MAX_CONCURRENCY=8 make --no-print-directory index CORPUS=data/sample/corpus INDEX="$work/single-remote" >/dev/null 2>&1
warned=$work/warned
submit "$warned" "$work/warned-jobs.txt"
tag=$(chain_tag "$warned")
# What --signal=B:USR1@<secs> sends to the batch shell before the time limit, to an embed task
# still running half a second after it was seen (a shard without documents ends at once). Sent
# once: scancel's exit code is not to be trusted here (it has reported an invalid job id for a
# task it did signal), so the task's log says whether it was taken.
task=""
deadline=$((SECONDS + 300))
while [ -z "$task" ] && [ "$SECONDS" -lt "$deadline" ]; do
  for candidate in $(squeue -h -t R -o '%A %j' 2>/dev/null | awk -v name="fs-embed@$tag" '$2 == name { print $1 }'); do
    sleep 0.5
    [ -n "$(squeue -h -t R -j "$candidate" -o %A 2>/dev/null)" ] || continue
    scancel --batch --signal=USR1 "$candidate" 2>/dev/null || true
    for _ in $(seq 50); do
      if grep -q "requeueing job $candidate to do the rest" "$warned"/.slurm-logs/embed-*.log 2>/dev/null; then
        task=$candidate
        break 2
      fi
      sleep 0.2
    done
  done
  sleep 0.2
done
[ -n "$task" ] || { echo "slurm-test: no embed task took the warning while it ran" >&2; exit 1; }
# A requeued job waits about two minutes before it may start again (Slurm's own delay).
wait_chain "$warned" 400
grep -q "stopped by SIGTERM" "$warned"/.slurm-logs/embed-*.log || { echo "slurm-test: the stage did not stop cleanly" >&2; exit 1; }
same_kb "$warned" "$work/warned-jobs.txt" "$work/single-remote"
echo "slurm-test: task $task, warned, stopped cleanly, was requeued and resumed; the kb is the same"
