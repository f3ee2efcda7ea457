#!/usr/bin/env bash
# The object-storage test of `make test`: against a local S3 server (moto_server from PyPI, installed
# into a virtual environment under data/venv/ on first use) started on 127.0.0.1 by this script and
# stopped by it (by pid), the sample corpus is built into s3://… by `make index`, and again by two
# concurrent shards per stage (the merge too, then its global step), and both kbs must equal the local-folder build's, table by table, read
# in place by flexstruct-sql. A rerun must find every stage up to date (it writes back only its
# manifest record), and so must flexstruct-status, queries of the remote index must answer exactly as the local one, and a prefix
# that holds no index must be refused with its URL named. Two merges racing on one index: one
# commits, the other is refused, the kb stays whole; queries while merges replace the kb answer
# from one whole kb each. flexstruct-serve must answer from the S3 index as the local one does and
# refuse to update it.
set -euo pipefail
bin=${BIN:-target/debug}
. cluster/s3/local.sh
work=$(mktemp -d)
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  stop_local_s3
}
trap cleanup EXIT
start_local_s3

export FLEXSTRUCT_EMBED__MODEL=hashing-64
run() { make --no-print-directory "$@" >"$work/make.log" 2>&1 || { tail -n 30 "$work/make.log" >&2; exit 1; }; }
echo "s3-test: local-folder build"
run index CORPUS=data/sample/corpus INDEX="$work/local"
echo "s3-test: make index INDEX=s3://$bucket/sample"
run index CORPUS=data/sample/corpus INDEX="s3://$bucket/sample"
echo "s3-test: two concurrent shards per stage into s3://$bucket/sharded"
for stage in $("$bin/flexstruct-index" --list-stages --from ingest); do
  extra=()
  [ "$stage" = ingest ] && extra=(--corpus data/sample/corpus)
  pids=()
  for k in 0 1; do
    "$bin/flexstruct-$stage" --index "s3://$bucket/sharded" --shard "$k/2" --quiet "${extra[@]}" 2>>"$work/shards.log" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { tail -n 20 "$work/shards.log" >&2; exit 1; }; done
done
"$bin/flexstruct-merge" --index "s3://$bucket/sharded" --quiet  # the global parts after the sharded merge

for table in entities hyperedges edges chunks hyperedge_entities clusters cluster_members aliases doc_stats thresholds; do
  q="SELECT * FROM kb.$table"
  "$bin/flexstruct-sql" --index "$work/local" --format csv "$q" | sort >"$work/local.csv"
  [ -s "$work/local.csv" ] || { echo "s3-test: kb.$table printed nothing" >&2; exit 1; }
  for index in sample sharded; do
    if ! diff -q "$work/local.csv" <("$bin/flexstruct-sql" --index "s3://$bucket/$index" --format csv "$q" | sort) >/dev/null; then
      echo "s3-test: kb.$table of s3://$bucket/$index differs from the local-folder build's" >&2
      exit 1
    fi
  done
done
echo "s3-test: both kbs on S3 equal the local-folder build's"

make --no-print-directory index CORPUS=data/sample/corpus INDEX="s3://$bucket/sample" 2>"$work/rerun.log" >/dev/null
if grep -E ': s3://.*wrote ([2-9]|[1-9][0-9])' "$work/rerun.log" >&2; then
  echo "s3-test: a rerun of an up-to-date index wrote more than its manifest records" >&2
  exit 1
fi
"$bin/flexstruct-status" --index "s3://$bucket/sample" >"$work/status.txt" \
  || { cat "$work/status.txt" >&2; echo "s3-test: flexstruct-status does not find s3://$bucket/sample up to date" >&2; exit 1; }
for index in "$work/local" "s3://$bucket/sample"; do
  "$bin/flexstruct-query" --index "$index" --questions data/sample/questions.jsonl --jsonl --quiet \
    | python3 -c 'import json, sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if not k.endswith("_ms")}, sort_keys=True)) for l in sys.stdin]' \
    >"$work/answers-$(basename "$index").jsonl"
done
if ! diff -q "$work/answers-local.jsonl" "$work/answers-sample.jsonl" >/dev/null; then
  echo "s3-test: answers from s3://$bucket/sample differ from the local index's" >&2
  exit 1
fi
if "$bin/flexstruct-query" --index "s3://$bucket/nothing-here" "Who?" 2>"$work/missing.log"; then
  echo "s3-test: a query of an empty prefix succeeded" >&2
  exit 1
fi
grep -q "s3://$bucket/nothing-here" "$work/missing.log" || { cat "$work/missing.log" >&2; exit 1; }
echo "s3-test: reruns write nothing new, queries answer as from the local index, a missing index is named"

# Two merges racing on one index: one commits, the other fails naming the generation that won (or
# finds the same kb committed), and the kb stays whole. Each round both have something new to write
# (approximate indexes of a number of lists no earlier round used), and they start together, so
# they overlap; at least one round must show the refusal.
refused=0
for round in 1 2 3; do
  pids=()
  for lists in $((2 * round)) $((2 * round + 1)); do
    FLEXSTRUCT_ANN__MIN_ROWS=1 FLEXSTRUCT_ANN__LISTS=$lists \
      "$bin/flexstruct-merge" --index "s3://$bucket/sample" --quiet >"$work/race-$round-$lists.log" 2>&1 &
    pids+=($!)
  done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
  for log in "$work"/race-"$round"-*.log; do
    if grep -q "error" "$log" && ! grep -q "another run committed kb generation" "$log"; then
      cat "$log" >&2; echo "s3-test: a racing merge failed otherwise than by losing the race" >&2; exit 1
    fi
  done
  [ "$failed" -le 1 ] || { cat "$work"/race-"$round"-*.log >&2; echo "s3-test: both racing merges failed" >&2; exit 1; }
  refused=$((refused + failed))
  "$bin/flexstruct-query" --index "s3://$bucket/sample" --questions data/sample/questions.jsonl --jsonl --quiet \
    | python3 -c 'import json, sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if not k.endswith("_ms")}, sort_keys=True)) for l in sys.stdin]' \
    >"$work/race-answers.jsonl"
  diff -q "$work/answers-local.jsonl" "$work/race-answers.jsonl" >/dev/null \
    || { echo "s3-test: after round $round of racing merges the kb answers otherwise" >&2; exit 1; }
done
[ "$refused" -ge 1 ] || { echo "s3-test: the racing merges never overlapped in 3 rounds" >&2; exit 1; }
echo "s3-test: of two merges racing, one commits and the other is refused ($refused of 3 rounds); the kb stays whole"

# Queries of an index whose kb merges keep replacing, from another process (as from another
# machine: no lock is shared): every query's answers must be those of one whole kb, the one with
# the Kestrel Valley document or the one without it, never a mix and never a failure.
mkdir -p "$work/corpus-full" "$work/corpus-small"
cp data/sample/corpus/* "$work/corpus-full/"
cp data/sample/corpus/* "$work/corpus-small/"
rm "$work/corpus-small/kestrel-valley-water-compact.md"
answers() {
  "$bin/flexstruct-query" --index "$1" --questions data/sample/questions.jsonl --jsonl --quiet \
    | python3 -c 'import json, sys; [print(json.dumps({k: v for k, v in json.loads(l).items() if not k.endswith("_ms")}, sort_keys=True)) for l in sys.stdin]'
}
for corpus in full small; do
  "$bin/flexstruct-index" --index "$work/ref-$corpus" --corpus "$work/corpus-$corpus" --quiet 2>>"$work/flip.log"
  answers "$work/ref-$corpus" >"$work/ref-$corpus.jsonl"
done
! diff -q "$work/ref-full.jsonl" "$work/ref-small.jsonl" >/dev/null || { echo "s3-test: the two kbs answer alike" >&2; exit 1; }
"$bin/flexstruct-index" --index "s3://$bucket/flip" --corpus "$work/corpus-full" --quiet 2>>"$work/flip.log"
(
  n=0
  while [ ! -e "$work/flips-done" ] || [ "$n" -lt 3 ]; do
    n=$((n + 1))
    answers "s3://$bucket/flip" >"$work/flip-$n.jsonl" 2>"$work/flip-$n.log" || echo "$n" >>"$work/flip-failed"
  done
) &
reader=$!
for corpus in small full small full; do
  "$bin/flexstruct-index" --index "s3://$bucket/flip" --corpus "$work/corpus-$corpus" --prune --quiet 2>>"$work/flip.log" \
    || { tail -n 20 "$work/flip.log" >&2; exit 1; }
done
touch "$work/flips-done"
wait "$reader"
if [ -e "$work/flip-failed" ]; then
  for n in $(cat "$work/flip-failed"); do cat "$work/flip-$n.log" >&2; done
  echo "s3-test: a query failed while merges replaced the kb" >&2; exit 1
fi
seen=""
for answers in "$work"/flip-[0-9]*.jsonl; do
  if diff -q "$answers" "$work/ref-full.jsonl" >/dev/null; then seen="$seen full"
  elif diff -q "$answers" "$work/ref-small.jsonl" >/dev/null; then seen="$seen small"
  else diff "$work/ref-full.jsonl" "$answers" >&2; echo "s3-test: $answers are the answers of neither kb" >&2; exit 1
  fi
done
echo "s3-test: $(echo $seen | wc -w) queries while 4 merges replaced the kb each answered from one whole kb:$seen"

# The service over the S3 index: answers as the local index does, and refuses updates (read-only).
serve_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/flexstruct-serve" --index "remote=s3://$bucket/sample" --listen "127.0.0.1:$serve_port" --quiet 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 300); do curl -fs "http://127.0.0.1:$serve_port/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
python3 - "$serve_port" "$work/answers-local.jsonl" <<'PY' || { cat "$work/serve.log" >&2; exit 1; }
import json, sys, urllib.error, urllib.request
port, local = sys.argv[1], sys.argv[2]
def post(path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)
for line in open(local):
    want = json.loads(line)
    status, got = post("/v1/query", {"question": want["question"], "id": want["id"]})
    got = {k: v for k, v in got.items() if not k.endswith("_ms")}
    assert status == 200 and json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True), (status, got, want)
status, refused = post("/v1/indexes/remote/documents", {"documents": [{"text": "x"}]})
assert status == 409 and "read-only" in refused["error"]["message"], (status, refused)
PY
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
serve_pid=""
echo "s3-test: flexstruct-serve answers from s3://$bucket/sample as the local index does, and refuses updates there"
