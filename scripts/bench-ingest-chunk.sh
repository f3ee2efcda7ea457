#!/usr/bin/env bash
# Times ingest + chunk of one corpus into a fresh temporary index and prints chunk statistics.
# Usage: scripts/bench-ingest-chunk.sh CORPUS [BIN_DIR]
set -euo pipefail
corpus=${1:?usage: $0 CORPUS [BIN_DIR]}
bin=${2:-target/debug}
index=$(mktemp -d)
trap 'rm -rf "$index"' EXIT

measure() { # name, command...
  local name=$1; shift
  /usr/bin/time -f "$name: %e s wall, %M KB peak RSS" "$@" --quiet
}
echo "corpus: $corpus ($(wc -c < "$corpus") bytes)"
start=$(date +%s.%N)
measure ingest "$bin/flexstruct-ingest" --index "$index" --corpus "$corpus"
measure chunk "$bin/flexstruct-chunk" --index "$index"
end=$(date +%s.%N)
echo "ingest + chunk: $(echo "$end - $start" | bc) s wall (including process start-up)"

sql() { "$bin/flexstruct-sql" --index "$index" "$1"; }
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
