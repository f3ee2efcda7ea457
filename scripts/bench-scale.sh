#!/usr/bin/env bash
# Scale measurements: for each FACTOR, a corpus of FACTOR × CORPUS (scripts/scale-corpus.py, in a
# temporary folder, never kept), built from an empty index with SHARDS concurrent shards per
# stage (each stage's shards started together, as a cluster's array tasks would), the merge too
# and then its global step; per stage the wall time and the largest peak RSS of its shards; then
# the files and bytes per table. Embedding uses EMBED_MODEL (hashing-64 by default: the
# construction stages' own cost; all-MiniLM-L6-v2 for the embedding's). With TASK=k only task k
# of each per-document stage runs (one cluster node's share: --shard k/SHARDS) and the merge is
# left out, so a MiniLM measurement at a large factor costs one shard's time, not the corpus's.
# Usage: scripts/bench-scale.sh CORPUS "FACTORS" "SHARDS" [BIN_DIR]   e.g. … "1 4" "1 2 4"
set -euo pipefail
corpus=${1:?usage: $0 CORPUS FACTORS SHARDS [BIN_DIR]}
factors=${2:?usage: $0 CORPUS FACTORS SHARDS [BIN_DIR]}
shard_counts=${3:?usage: $0 CORPUS FACTORS SHARDS [BIN_DIR]}
bin=${4:-target/debug}
export FLEXSTRUCT_EMBED__MODEL=${EMBED_MODEL:-hashing-64}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "| factor | documents | MB of text | shards | stage | wall s | max peak RSS MB |"
echo "|---|---|---|---|---|---|---|"
for factor in $factors; do
  scripts/scale-corpus.py "$corpus" "$factor" "$work/corpus.jsonl" 2>/dev/null
  docs=$(wc -l < "$work/corpus.jsonl")
  mb=$(python3 -c "import json,sys; print(round(sum(len(json.loads(l)['text']) for l in open(sys.argv[1], encoding='utf-8')) / 1e6, 1))" "$work/corpus.jsonl")
  for n in $shard_counts; do
    index="$work/index-$factor-$n"
    total=0
    stages="$("$bin/flexstruct-index" --list-stages --from ingest | tr '\n' ' ')final"
    tasks=$(seq 0 $((n - 1)))
    label=$n
    if [ -n "${TASK:-}" ]; then
      stages=${stages% merge final}
      tasks=$TASK
      label="task $TASK of $n"
    fi
    for stage in $stages; do
      start=$(date +%s.%N)
      pids=()
      for k in $tasks; do
        args=(--index "$index" --shard "$k/$n" --quiet)
        binary=$stage
        [ "$stage" = ingest ] && args+=(--corpus "$work/corpus.jsonl")
        if [ "$stage" = final ]; then
          [ "$k" = 0 ] || continue
          binary=merge
          args=(--index "$index" --quiet)
        fi
        /usr/bin/time -f "%M" -o "$work/rss-$k" "$bin/flexstruct-$binary" "${args[@]}" &
        pids+=($!)
      done
      for pid in "${pids[@]}"; do wait "$pid"; done
      end=$(date +%s.%N)
      wall=$(echo "$end - $start" | bc)
      total=$(echo "$total + $wall" | bc)
      rss=$(cat "$work"/rss-* | sort -n | tail -1)
      rm -f "$work"/rss-*
      printf '| %s | %s | %s | %s | %s | %.1f | %d |\n' "$factor" "$docs" "$mb" "$label" "$stage" "$wall" $((rss / 1024))
    done
    printf '| %s | %s | %s | %s | **all** | %.1f | |\n' "$factor" "$docs" "$mb" "$label" "$total"
    "$bin/flexstruct-sql" --index "$index" --format csv \
      "SELECT unit, count(*) AS embedded FROM embeddings GROUP BY unit ORDER BY unit"
    if [ -z "${TASK:-}" ] && [ "$n" = "$(echo "$shard_counts" | awk '{ print $NF }')" ]; then
      echo ""
      echo "files and bytes per table (factor $factor):"
      for dir in "$index"/*/ "$index"/kb/*/; do
        name=${dir#"$index"/}
        [ "$name" = kb/ ] && continue
        printf '  %-24s %5d files %10d bytes\n' "${name%/}" "$(find "$dir" -maxdepth 1 -name '*.parquet' | wc -l)" \
          "$(find "$dir" -maxdepth 1 -name '*.parquet' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')"
      done
      echo ""
    fi
    rm -rf "$index"
  done
done
