#!/usr/bin/env bash
# `make llm-index`: builds an index through the LLM path and prints what it cost, against one of
#   LLM=standin (the default) the stand-in LLM server — test and benchmark tooling, not a model: it
#                answers our prompts from the prompt text, with injected faults (FAULTS: the share
#                of first attempts that get one) — on a free loopback port; it also serves the
#                embeddings;
#   LLM=local    `make local-llm`'s real model (LLM_MODEL=gemma3-270m or smollm2-135m, PORT), started
#                here unless it already runs, and then stopped here; embeddings by the configured
#                embedder. One request at a time (the server answers one at a time) and a timeout
#                of 900 s (a small model's long answer under a grammar), unless
#                FLEXSTRUCT_LLM__MAX_CONCURRENCY / __TIMEOUT_SECS say otherwise.
# Every construction stage runs with items, summaries and relations on the LLM (CONFIG: a config
# file for the rest); the stages are rerun once if any unit failed (only what failed is redone);
# then the failures, the calls by status and form and the construction cost table are printed.
# Usage: [LLM=standin|local] [CONFIG=FILE] scripts/llm-index.sh CORPUS INDEX [FAULTS] [BIN_DIR]
set -euo pipefail
corpus=${1:?usage: $0 CORPUS INDEX [FAULTS] [BIN_DIR]}
index=${2:?usage: $0 CORPUS INDEX [FAULTS] [BIN_DIR]}
faults=${3:-0}
bin=${4:-target/debug}
llm=${LLM:-standin}
work=$(mktemp -d)
standin=""     # the stand-in's pid
started_model="" # a local model this script started, stopped on exit
finish() {
  if [ -n "$standin" ]; then kill "$standin" 2>/dev/null || true; wait "$standin" 2>/dev/null || true; fi
  if [ -n "$started_model" ]; then MODEL=$started_model STOP=1 scripts/local-llm.sh || true; fi
  rm -rf "$work"
}
trap finish EXIT

case $llm in
  standin)
    "$bin/flexstruct-standin-llm" --faults "$faults" --slow-seconds 3 --url-file "$work/url" --stats-file "$work/stats.json" &
    standin=$!
    for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
    url=$(cat "$work/url")
    export FLEXSTRUCT_LLM__BASE_URL="$url" FLEXSTRUCT_LLM__MODEL=standin FLEXSTRUCT_LLM__API_KEY_ENV=""
    export FLEXSTRUCT_LLM__TIMEOUT_SECS=2 FLEXSTRUCT_LLM__BACKOFF_INITIAL_MS=50 FLEXSTRUCT_LLM__MAX_CONCURRENCY=16
    export FLEXSTRUCT_EMBED__MODEL=standin-embeddings FLEXSTRUCT_EMBED__BASE_URL="$url" FLEXSTRUCT_EMBED__API_KEY_ENV=""
    ;;
  local)
    if [ "$faults" != 0 ]; then echo "llm-index: FAULTS=$faults is the stand-in's; a real model brings its own" >&2; exit 2; fi
    model=${LLM_MODEL:-gemma3-270m}
    if ! url=$(MODEL=$model STATUS=1 scripts/local-llm.sh); then
      started_model=$model
      MODEL=$model scripts/local-llm.sh
      url=$(MODEL=$model STATUS=1 scripts/local-llm.sh)
    fi
    export FLEXSTRUCT_LLM__BASE_URL="$url" FLEXSTRUCT_LLM__MODEL=$model FLEXSTRUCT_LLM__API_KEY_ENV=""
    export FLEXSTRUCT_LLM__TIMEOUT_SECS=${FLEXSTRUCT_LLM__TIMEOUT_SECS:-900}
    export FLEXSTRUCT_LLM__MAX_CONCURRENCY=${FLEXSTRUCT_LLM__MAX_CONCURRENCY:-1}
    ;;
  *) echo "llm-index: LLM must be standin or local, not '$llm'" >&2; exit 2 ;;
esac
export FLEXSTRUCT_BACKENDS__EXTRACT=llm FLEXSTRUCT_BACKENDS__SUMMARIES=llm FLEXSTRUCT_BACKENDS__RELATIONS=llm

timed() {
  if [ -x /usr/bin/time ]; then /usr/bin/time -f "$1: %e s wall, %M KB peak RSS" "${@:2}"; else "${@:2}"; fi
}

# Every stage in one process, going on past failed units (exit 1) so that one rerun retries them.
run_stages() {
  local code=0
  timed index "$bin/flexstruct-index" --index "$index" --corpus "$corpus" ${CONFIG:+--config "$CONFIG"} \
    --keep-going --quiet || code=$?
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
if [ -n "$standin" ]; then
  echo "== stand-in: requests and faults by kind =="
  cat "$work/stats.json"; echo
fi
echo "== client: calls by status and form =="
"$bin/flexstruct-sql" --index "$index" "SELECT stage, status, response_format, count(*) AS calls FROM llm_calls GROUP BY stage, status, response_format ORDER BY stage, status, response_format"
echo "== construction cost =="
"$bin/flexstruct-eval" cost --index "$index"
exit "$status"
