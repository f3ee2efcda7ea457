#!/usr/bin/env bash
# Builds an index through the LLM path against the stand-in LLM server (test and benchmark
# tooling, not a model: it answers our prompts from the prompt text, with injected faults).
# Starts the stand-in on a free loopback port, runs every construction stage with [llm] pointed
# at it (items, summaries and relations on the "LLM", embeddings by its /v1/embeddings), reruns
# the stages once if any unit failed, stops the stand-in, and prints the failures, the fault
# counts and the construction cost table.
# Usage: scripts/llm-index.sh CORPUS INDEX [FAULTS] [BIN_DIR]
set -euo pipefail
corpus=${1:?usage: $0 CORPUS INDEX [FAULTS] [BIN_DIR]}
index=${2:?usage: $0 CORPUS INDEX [FAULTS] [BIN_DIR]}
faults=${3:-0}
bin=${4:-target/debug}
work=$(mktemp -d)
"$bin/flexstruct-standin-llm" --faults "$faults" --slow-seconds 3 --url-file "$work/url" --stats-file "$work/stats.json" &
standin=$!
trap 'kill "$standin" 2>/dev/null || true; wait "$standin" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
url=$(cat "$work/url")

export FLEXSTRUCT_LLM__BASE_URL="$url" FLEXSTRUCT_LLM__MODEL=standin FLEXSTRUCT_LLM__API_KEY_ENV=""
export FLEXSTRUCT_LLM__TIMEOUT_SECS=2 FLEXSTRUCT_LLM__BACKOFF_INITIAL_MS=50 FLEXSTRUCT_LLM__MAX_CONCURRENCY=16
export FLEXSTRUCT_BACKENDS__EXTRACT=llm FLEXSTRUCT_BACKENDS__SUMMARIES=llm FLEXSTRUCT_BACKENDS__RELATIONS=llm
export FLEXSTRUCT_EMBED__MODEL=standin-embeddings FLEXSTRUCT_EMBED__BASE_URL="$url" FLEXSTRUCT_EMBED__API_KEY_ENV=""

timed() {
  if [ -x /usr/bin/time ]; then /usr/bin/time -f "$1: %e s wall, %M KB peak RSS" "${@:2}"; else "${@:2}"; fi
}

# Every stage in one process, going on past failed units (exit 1) so that one rerun retries them.
run_stages() {
  local code=0
  timed index "$bin/flexstruct-index" --index "$index" --corpus "$corpus" --keep-going --quiet || code=$?
  case $code in
    0 | 1) return $code ;;
    *) echo "flexstruct-index: exit $code" >&2; return 2 ;;
  esac
}

start=$(date +%s%N)
status=0
run_stages || status=$?
if [ "$status" = 1 ]; then
  echo "== some units failed: rerunning the stages once (only what failed is redone) =="
  status=0
  run_stages || status=$?
fi
end=$(date +%s%N)
echo "all stages: $(( (end - start) / 1000000 )) ms wall"
echo "== failures =="
"$bin/flexstruct-sql" --index "$index" "SELECT stage, kind, count(*) AS n FROM failures GROUP BY stage, kind ORDER BY stage, kind"
echo "== stand-in: requests and faults by kind =="
cat "$work/stats.json"; echo
echo "== client: calls by status =="
"$bin/flexstruct-sql" --index "$index" "SELECT stage, status, count(*) AS calls FROM llm_calls GROUP BY stage, status ORDER BY stage, status"
echo "== construction cost =="
"$bin/flexstruct-eval" cost --index "$index"
exit "$status"
