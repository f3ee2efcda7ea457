#!/usr/bin/env bash
# `make bench-local-llm`: what a real local model does as our extractor. For each model of
# MODELS (make local-llm's) and each llm.structured_output of FORMS, builds CORPUS through the
# LLM path (items, summaries, relations; hashing embeddings, so that only the LLM differs from
# the rules build), then prints: answers that parsed, items per chunk, spans located exactly /
# after folding / not at all, what was left out, entities and edges per document, tokens in and
# out, wall time and tokens/s; and the answer-token recall of hybrid at a 1,100-token budget on
# QUESTIONS over that kb beside the rules-built kb's. Answers are capped at MAX_TOKENS.
# READER_SETS="2wiki …" (question sets under QA_ROOT, indexed under data/indexes/<set>) then
# measures each model as the reader: EM and F1 of hybrid's short answers from 1,100-token
# contexts on the first READER_LIMIT questions of each set's test half, beside the extractive
# reader's, the answers the model failed to give (cut twice), and the seconds per answer
# (retrieval by the rules in both). FORMS="" skips the
# construction.
# DOCS="id …" builds only those documents of a .jsonl CORPUS, and asks only the questions whose
# documents are all among them. WORK=DIR keeps the work folder (indexes, their LLM caches, logs)
# instead of a temporary one: a run stopped part-way is resumed by running it again with the same
# WORK (finished buckets are skipped, answered calls come from the cache; the wall time printed
# is then the last run's).
# Usage: scripts/bench-local-llm.sh CORPUS QUESTIONS
set -euo pipefail
corpus=${1:?usage: $0 CORPUS QUESTIONS}
questions=${2:?usage: $0 CORPUS QUESTIONS}
bin=${BIN:-target/debug}
models=${MODELS:-smollm2-135m gemma3-270m}
forms=${FORMS-json_schema none}
if [ -n "${WORK:-}" ]; then work=$WORK; mkdir -p "$work"; else work=$(mktemp -d); fi
export LLM_STATE="$work/llm"
running=""
cleanup() {
  [ -n "$running" ] && MODEL=$running STOP=1 scripts/local-llm.sh >/dev/null 2>&1 || true
  [ -n "${WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${DOCS:-}" ]; then
  mkdir -p "$work/corpus"
  python3 - "$corpus" "$questions" "$work/corpus/corpus.jsonl" "$work/questions.jsonl" $DOCS <<'EOF'
import json, sys
corpus, questions, corpus_out, questions_out, *docs = sys.argv[1:]
wanted = set(docs)
kept = [l for l in open(corpus, encoding="utf-8") if l.strip() and json.loads(l)["doc_id"] in wanted]
missing = wanted - {json.loads(l)["doc_id"] for l in kept}
if missing:
    sys.exit(f"bench-local-llm: DOCS not in {corpus}: {' '.join(sorted(missing))}")
open(corpus_out, "w", encoding="utf-8").writelines(kept)
asked = [l for l in open(questions, encoding="utf-8") if l.strip() and set(json.loads(l).get("doc_ids") or ["?"]) <= wanted]
open(questions_out, "w", encoding="utf-8").writelines(asked)
print(f"bench-local-llm: {len(kept)} documents, {len(asked)} questions")
EOF
  corpus="$work/corpus/corpus.jsonl" questions="$work/questions.jsonl"
fi

unset FLEXSTRUCT_CONFIG
export FLEXSTRUCT_EMBED__MODEL=hashing-256 FLEXSTRUCT_BACKENDS__ANSWERS=rules
sql() { "$bin/flexstruct-sql" --index "$1" --format json "$2"; }
recall() {
  "$bin/flexstruct-eval" run --index "$1" --questions "$questions" --out "$work/eval-$2" --modes hybrid \
    --max-context-tokens 1100 >/dev/null 2>&1
  python3 -c 'import json, sys; h = json.load(open(sys.argv[1]))["hybrid"]
print(json.dumps({k: h[k] for k in ("answer_recall", "answer_token_recall", "evidence_recall", "context_tokens_mean") if k in h}))' \
    "$work/eval-$2/summary.json"
}

if [ -n "$forms" ]; then
  "$bin/flexstruct-index" --index "$work/rules" --corpus "$corpus" --quiet >/dev/null 2>&1
  echo "rules kb: $(sql "$work/rules" "SELECT (SELECT count(*) FROM kb.hyperedges) AS hyperedges, (SELECT count(*) FROM kb.entities) AS entities, (SELECT count(*) FROM kb.edges) AS edges")"
  echo "rules recall: $(recall "$work/rules" rules)"
fi

reader() { # MODEL_OR_RULES SET PORT
  local out="$work/reader-$1-$2" start
  start=$(date +%s.%N)
  env -u FLEXSTRUCT_EMBED__MODEL FLEXSTRUCT_LLM__BASE_URL="http://127.0.0.1:${3:-1}/v1" FLEXSTRUCT_LLM__MODEL=$1 FLEXSTRUCT_LLM__API_KEY_ENV="" \
    FLEXSTRUCT_LLM__MAX_TOKENS=${MAX_TOKENS:-1024} FLEXSTRUCT_LLM__MAX_CONCURRENCY=1 FLEXSTRUCT_LLM__TIMEOUT_SECS=600 \
    FLEXSTRUCT_LLM__MAX_RETRIES=1 FLEXSTRUCT_BACKENDS__ALL=rules \
    FLEXSTRUCT_BACKENDS__ANSWERS=$([ "$1" = rules ] && echo rules || echo llm) \
    "$bin/flexstruct-eval" run --index "data/indexes/$2" --questions "${QA_ROOT:-../shared/qa}/$2" --split test \
    --limit "${READER_LIMIT:-30}" --modes hybrid --max-context-tokens 1100 --out "$out" >/dev/null 2>&1 || true
  python3 - "$1" "$2" "$start" "$out/summary.json" <<'EOF'
import json, sys, time
who, qa, start, summary = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
seconds = time.time() - start
try:
    h = json.load(open(summary))["hybrid"]
except (OSError, KeyError, ValueError) as e:
    print(f"reader {who} on {qa}: no summary ({e})"); sys.exit(0)
n = sum(t.get("n", 0) for t in h.get("by_type", {}).values())
print(f"reader {who} on {qa}: n {n}, EM {h.get('em')}, F1 {h.get('f1')}, unanswered {h.get('n_answer_failed')}, "
      f"answer recall {h.get('answer_recall')}, "
      f"{seconds / max(n, 1):.3g} s per question (retrieval included)")
EOF
}
for qa in ${READER_SETS:-}; do reader rules "$qa"; done

for model in $models; do
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  MODEL=$model PORT=$port scripts/local-llm.sh >/dev/null
  running=$model
  for qa in ${READER_SETS:-}; do reader "$model" "$qa" "$port"; done
  for form in $forms; do
    index="$work/$model-$form"
    start=$(date +%s.%N)
    FLEXSTRUCT_LLM__BASE_URL="http://127.0.0.1:$port/v1" FLEXSTRUCT_LLM__MODEL=$model FLEXSTRUCT_LLM__API_KEY_ENV="" \
      FLEXSTRUCT_LLM__MAX_TOKENS=${MAX_TOKENS:-1024} FLEXSTRUCT_LLM__MAX_CONCURRENCY=1 FLEXSTRUCT_LLM__TIMEOUT_SECS=600 \
      FLEXSTRUCT_LLM__MAX_RETRIES=1 FLEXSTRUCT_LLM__STRUCTURED_OUTPUT=$form \
      FLEXSTRUCT_BACKENDS__EXTRACT=llm FLEXSTRUCT_BACKENDS__SUMMARIES=llm FLEXSTRUCT_BACKENDS__RELATIONS=llm \
      "$bin/flexstruct-index" --index "$index" --corpus "$corpus" --keep-going --quiet >"$work/$model-$form.log" 2>&1 || true
    wall=$(python3 -c "import time, sys; print(round(time.time() - float(sys.argv[1]), 1))" "$start")
    python3 - "$model" "$form" "$wall" \
      "$(sql "$index" "SELECT inputs FROM manifest WHERE stage = 'extract'")" \
      "$(sql "$index" "SELECT inputs FROM manifest WHERE stage = 'graph'")" \
      "$(sql "$index" "SELECT stage, kind, count(*) AS n FROM failures GROUP BY stage, kind")" \
      "$(sql "$index" "SELECT status, count(*) AS n, sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion, sum(latency_ms) AS ms FROM llm_calls GROUP BY status")" \
      "$(sql "$index" "SELECT (SELECT count(*) FROM documents) AS docs, (SELECT count(*) FROM kb.hyperedges) AS hyperedges, (SELECT count(*) FROM kb.entities) AS entities, (SELECT count(*) FROM kb.edges) AS edges")" \
      "$(recall "$index" "$model-$form")" <<'EOF'
import json, sys
model, form, wall = sys.argv[1:4]
extract, graph, failures, calls, kb, recall = (json.loads(a) for a in sys.argv[4:])
def totals(runs):
    """The counts of a stage's runs' details, summed."""
    out = {}
    for run in runs:
        for k, v in json.loads(run["inputs"])["details"].items():
            if isinstance(v, int):
                out[k] = out.get(k, 0) + v
    return out
d, g = totals(extract), totals(graph)
fails = {f"{f['stage']}/{f['kind']}": f["n"] for f in failures}
chunks = d.get("chunks", 0)
unparsed = sum(n for k, n in fails.items() if k.endswith("unparseable"))
cut = sum(n for k, n in fails.items() if k.endswith("truncated"))
items = d.get("items", 0)
ok = [c for c in calls if c["status"] in ("ok", "length")]
completion = sum(c["completion"] or 0 for c in ok)
prompt = sum(c["prompt"] or 0 for c in ok)
seconds = sum(c["ms"] or 0 for c in ok) / 1000
docs = kb[0]["docs"] or 1
share = lambda n: f"{100 * n / items:.0f} %" if items else "-"
print(f"{model} {form}: {chunks} chunks; extract failures {fails or 'none'}; items parsed for "
      f"{chunks - unparsed - cut}/{chunks} chunks; {items / max(chunks, 1):.1f} items/chunk; spans exact "
      f"{share(d.get('located_exact', 0))}, folded {share(d.get('located_normalised', 0))}, none "
      f"{share(d.get('unlocated', 0))}; left out: empty {d.get('dropped_empty', 0)}, example copies "
      f"{d.get('dropped_example', 0)}, blank entities {d.get('dropped_entities', 0)}, chunks without items "
      f"{d.get('chunks_without_items', 0)}; relations unresolved {g.get('unresolved_ends', 0)}; kb per doc: "
      f"{kb[0]['hyperedges'] / docs:.1f} hyperedges, {kb[0]['entities'] / docs:.1f} entities, "
      f"{kb[0]['edges'] / docs:.1f} edges; tokens in {prompt}, out {completion}; wall {wall} s; "
      f"{completion / seconds if seconds else 0:.1f} tokens/s out; calls "
      f"{ {c['status']: c['n'] for c in calls} }")
print(f"  recall: {json.dumps(recall)}")
EOF
  done
  MODEL=$model STOP=1 scripts/local-llm.sh >/dev/null
  running=""
done
