#!/usr/bin/env bash
# Times every stage on one corpus in a fresh temporary index (wall time and peak memory per
# stage), then a batch of questions per retrieval mode when a questions.jsonl lies beside the
# corpus, then prints chunk and knowledge-structure statistics.
# Usage: scripts/bench.sh CORPUS [BIN_DIR]
set -euo pipefail
corpus=${1:?usage: $0 CORPUS [BIN_DIR]}
bin=${2:-target/debug}
index=$(mktemp -d)
trap 'rm -rf "$index"' EXIT

echo "corpus: $corpus ($(wc -c < "$corpus") bytes)"
start=$(date +%s.%N)
/usr/bin/time -f "ingest: %e s wall, %M KB peak RSS" "$bin/flexstruct-ingest" --index "$index" --corpus "$corpus" --quiet
for stage in $("$bin/flexstruct-index" --list-stages); do
  /usr/bin/time -f "$stage: %e s wall, %U s user, %M KB peak RSS" "$bin/flexstruct-$stage" --index "$index" --quiet
done
end=$(date +%s.%N)
echo "all stages: $(echo "$end - $start" | bc) s wall (including process start-up)"

questions="$(dirname "$corpus")/questions.jsonl"
if [ -f "$questions" ]; then
  echo "== queries: $(wc -l < "$questions") questions of $questions, one process per mode =="
  for mode in hybrid hypergraph graph chunks hypergraphrag; do
    /usr/bin/time -f "query $mode: %e s wall, %M KB peak RSS" \
      "$bin/flexstruct-query" --index "$index" --questions "$questions" --out "$index/answers-$mode.jsonl" --mode "$mode"
  done
fi

sql() { "$bin/flexstruct-sql" --index "$index" "$1"; }
if [ -x "$bin/examples/prompt_cost" ]; then
  echo "== prompt tokens an LLM extraction of this corpus would send =="
  "$bin/examples/prompt_cost" "$index"
fi
echo "== chunks =="
sql "SELECT count(DISTINCT doc_id) AS documents, count(*) AS chunks,
            round(count(*) * 1.0 / count(DISTINCT doc_id), 2) AS chunks_per_document,
            min(n_tokens) AS min_tokens, round(avg(n_tokens), 1) AS mean_tokens, max(n_tokens) AS max_tokens
     FROM chunks"
sql "SELECT CASE WHEN n_tokens < 100 THEN '    0-99'
                 WHEN n_tokens < 500 THEN '  100-499'
                 WHEN n_tokens <= 600 THEN '  500-600'
                 WHEN n_tokens < 800 THEN '  601-799'
                 WHEN n_tokens < 1100 THEN ' 800-1099'
                 ELSE '1100+' END AS tokens, count(*) AS chunks
     FROM chunks GROUP BY 1 ORDER BY 1"
echo "== knowledge structures =="
sql "WITH d AS (SELECT count(*) AS n FROM documents)
     SELECT (SELECT count(*) FROM items) AS items,
            round((SELECT count(*) FROM items) * 1.0 / (SELECT n FROM d), 1) AS items_per_doc,
            round((SELECT count(*) FROM hyperedges) * 1.0 / (SELECT n FROM d), 1) AS hyperedges_per_doc,
            round((SELECT count(*) FROM entities) * 1.0 / (SELECT n FROM d), 1) AS entities_per_doc,
            round((SELECT count(*) FROM edges) * 1.0 / (SELECT n FROM d), 1) AS edges_per_doc,
            round(100.0 * (SELECT count(*) FROM items WHERE ref_start IS NOT NULL) / (SELECT count(*) FROM items), 2)
              AS located_pct"
sql "SELECT CASE WHEN hyperdegree = 1 THEN '   1' WHEN hyperdegree <= 3 THEN '  2-3'
                 WHEN hyperdegree <= 9 THEN '  4-9' WHEN hyperdegree <= 30 THEN ' 10-30' ELSE '31+' END AS hyperdegree,
            count(*) AS entities
     FROM entities GROUP BY 1 ORDER BY 1"
