#!/usr/bin/env bash
# `make local-llm-test` (part of `make test`): the LLM path against a real OpenAI-compatible
# server and a real model — llama.cpp's server with SmolLM2-135M (LLM_MODEL=gemma3-270m for the
# other; it loops until the token cap, so a run takes minutes), set up and started by
# scripts/local-llm.sh (the first run on a machine builds it: about 5 minutes; later runs reuse
# it). Bounded: two paragraphs of the sample corpus (a few chunks), answers capped at 320 tokens,
# one request at a time. The whole construction runs twice, as `make llm-index LLM=local` runs
# it (scripts/llm-index.sh: the first time it starts the server and stops it after, the second
# time it finds one running and leaves it), with llm.structured_output = json_schema (the server
# refuses that form and the client steps down to json_object with the schema) and = none (free
# text, read by the tolerant parser), then one question is answered by the model from the kb.
# Checks, for both: no unit lost (every chunk has items, a failure row or is counted as answered
# without items), every located span is the document's own text, every call recorded with the
# form it carried, and the server stopped only if llm-index started it; with the schema, every
# answer parsed and the server's refusal of json_schema was learnt (once per process, by the
# requests then formed). The server is stopped by this script.
set -euo pipefail
bin=${BIN:-target/debug}
model=${LLM_MODEL:-smollm2-135m}
work=$(mktemp -d)
export LLM_STATE="$work/llm"
cleanup() {
  MODEL=$model STOP=1 scripts/local-llm.sh >/dev/null 2>&1 || true
  if [ "${KEEP:-0}" = 1 ]; then echo "local-llm-test: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
export PORT
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
port=$PORT
server_runs() { MODEL=$model STATUS=1 scripts/local-llm.sh >/dev/null; }
echo "local-llm-test: $model on 127.0.0.1:$port"

# Two paragraphs of one sample document: a few chunks at the chunk sizes below.
mkdir -p "$work/corpus"
python3 - data/sample/corpus/harbour-lights-festival.md "$work/corpus/harbour.md" <<'EOF'
import sys
paragraphs = [p for p in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if p.strip()]
open(sys.argv[2], "w", encoding="utf-8").write("\n\n".join(paragraphs[:2]) + "\n")
EOF
question='Who organises the Harbour Lights Festival?'

unset FLEXSTRUCT_CONFIG
export FLEXSTRUCT_LLM__BASE_URL="http://127.0.0.1:$port/v1" FLEXSTRUCT_LLM__MODEL=$model FLEXSTRUCT_LLM__API_KEY_ENV=""
export FLEXSTRUCT_LLM__MAX_TOKENS=320 FLEXSTRUCT_LLM__MAX_CONCURRENCY=1 FLEXSTRUCT_LLM__TIMEOUT_SECS=300
export FLEXSTRUCT_LLM__MAX_RETRIES=1 FLEXSTRUCT_BACKENDS__ALL=llm
export FLEXSTRUCT_CHUNK__CT_MIN=40 FLEXSTRUCT_CHUNK__CT_MAX=90 FLEXSTRUCT_EMBED__MODEL=hashing-64

sql() { "$bin/flexstruct-sql" --index "$1" --format json "$2"; }
status=0
for form in json_schema none; do
  index="$work/$form"
  start=$(date +%s)
  code=0
  # The construction as `make llm-index LLM=local` runs it: the first time the server does not
  # run yet, and the script starts it and stops it after; the second time it finds this test's
  # own server running, and leaves it running.
  [ "$form" = json_schema ] || server_runs || MODEL=$model CTX=4096 scripts/local-llm.sh >"$work/local-llm.out"
  ran_before=$(server_runs && echo 1 || echo 0)
  FLEXSTRUCT_LLM__STRUCTURED_OUTPUT=$form LLM=local LLM_MODEL=$model scripts/llm-index.sh "$work/corpus" "$index" 0 "$bin" \
    >"$work/$form.log" 2>&1 || code=$?
  seconds=$(( $(date +%s) - start ))
  if [ "$code" -gt 1 ]; then
    echo "local-llm-test: $form: llm-index exit $code" >&2; tail -n 30 "$work/$form.log" >&2; status=1; continue
  fi
  if [ "$ran_before" = 1 ] && ! server_runs; then
    echo "local-llm-test: $form: llm-index stopped a server it did not start" >&2; status=1
  elif [ "$ran_before" = 0 ] && server_runs; then
    echo "local-llm-test: $form: llm-index left running the server it started" >&2; status=1
  fi
  reruns=$(grep -c "rerunning the stages once" "$work/$form.log" || true)
  server_runs || MODEL=$model CTX=4096 scripts/local-llm.sh >"$work/local-llm.out"
  # A question the model cannot answer within the cap fails alone (exit 1, said in the output).
  code=0
  FLEXSTRUCT_LLM__STRUCTURED_OUTPUT=$form "$bin/flexstruct-query" --index "$index" --mode hybrid "$question" \
    >"$work/$form.answer" 2>>"$work/$form.log" || code=$?
  [ "$code" -le 1 ] || { echo "local-llm-test: $form: flexstruct-query exit $code" >&2; tail -n 20 "$work/$form.log" >&2; status=1; }
  python3 - "$form" "$seconds" "$reruns" "$work/$form.answer" \
    "$(sql "$index" "SELECT doc_id, chunk_idx FROM chunks")" \
    "$(sql "$index" "SELECT doc_id, chunk_idx, count(*) AS n FROM items GROUP BY doc_id, chunk_idx")" \
    "$(sql "$index" "SELECT stage, doc_id, unit, kind, message FROM failures")" \
    "$(sql "$index" "SELECT stage, inputs FROM manifest")" \
    "$(sql "$index" "SELECT stage, purpose, status, response_format, count(*) AS n, sum(completion_tokens) AS tokens FROM llm_calls GROUP BY stage, purpose, status, response_format ORDER BY stage, purpose, status")" \
    "$(sql "$index" "SELECT count(*) AS n FROM items i JOIN documents d USING (doc_id) WHERE i.ref_start IS NOT NULL AND substr(d.text, i.ref_start + 1, i.ref_end - i.ref_start) <> i.ref_text")" \
    "$(sql "$index" "SELECT (SELECT count(*) FROM kb.hyperedges) AS hyperedges, (SELECT count(*) FROM kb.entities) AS entities, (SELECT count(*) FROM kb.edges) AS edges")" \
    <<'EOF' || status=1
import json, sys
form, seconds, reruns, answer_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
chunks, items, failures, manifest, calls, misplaced, kb = (json.loads(a) for a in sys.argv[5:])
problems = []
with_items = {(r["doc_id"], r["chunk_idx"]) for r in items}
failed = {(f["doc_id"], f["unit"]) for f in failures if f["stage"] == "extract"}
extract_runs = [json.loads(m["inputs"])["details"] for m in manifest if m["stage"] == "extract"]
without_items = sum(d.get("chunks_without_items", 0) for d in extract_runs)
lost = [c for c in chunks if (c["doc_id"], c["chunk_idx"]) not in with_items
        and (c["doc_id"], f"chunk {c['chunk_idx']}") not in failed]
if len(lost) != without_items:
    problems.append(f"{len(lost)} chunks have neither items nor a failure row, but {without_items} were counted "
                    "as answered without items")
if misplaced[0]["n"]:
    problems.append(f"{misplaced[0]['n']} located spans are not the document's text at their offsets")
statuses = {}
for c in calls:
    statuses[c["status"]] = statuses.get(c["status"], 0) + c["n"]
if form == "json_schema":
    unparseable = [f for f in failures if f["kind"] == "unparseable"]
    if unparseable:
        problems.append(f"{len(unparseable)} answers did not parse although decoding followed the schema: "
                        + unparseable[0]["message"])
    # The server refuses json_schema: learnt once per process (index, its rerun if units failed,
    # then query), by every request already formed when the first refusal came back (here the
    # first bucket's chunks).
    if not 1 <= statuses.get("format_refused_json_schema", 0) <= (1 + reruns) * len(chunks) + 1:
        problems.append(f"expected the json_schema refusal once per process, got {statuses}")
    # Every JSON prompt answered went out with the form the server takes, as llm_calls says.
    answered = {c["response_format"] for c in calls if c["status"] == "ok" and c["purpose"] != "answer"}
    if answered != {"json_object"}:
        problems.append(f"answered JSON prompts carried {answered}, not json_object")
elif any(s.startswith("format_refused") for s in statuses) or any(c["response_format"] for c in calls):
    problems.append(f"structured_output = none sent a response_format: {calls}")
answer = open(answer_file, encoding="utf-8").read()
line = next((l for l in answer.splitlines() if l.startswith("A: ")), None)
if line is None:
    problems.append("the question got no answer line")
counts = {k: sum(d.get(k, 0) for d in extract_runs) for k in
          ("chunks", "items", "located_exact", "located_normalised", "unlocated", "dropped_empty", "dropped_example")}
print(f"local-llm-test: {form}: {len(chunks)} chunks, {seconds} s ({reruns} reruns); extract {counts}; failures "
      f"{len(failures)}; kb {kb[0]}; calls {statuses}")
print(f"  {line[:200] if line else '(no answer line)'}")
for p in problems:
    print(f"local-llm-test: {form}: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
done
[ "$status" = 0 ] && echo "local-llm-test: passed" || { echo "local-llm-test: FAILED (logs were in $work)" >&2; }
exit "$status"
