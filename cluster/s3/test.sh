#!/usr/bin/env bash
# The object-storage test of `make test`: against a local S3 server (moto_server from PyPI, installed
# into a virtual environment under data/venv/ on first use) started on 127.0.0.1 by this script and
# stopped by it (by pid), the sample corpus is built into s3://… by `make index`, and again by two
# concurrent shards per stage (the merge too, then its global step), and both kbs must equal the local-folder build's, table by table, read
# in place by flexstruct-sql. A rerun must find every stage up to date (it writes back only its
# manifest record), and so must flexstruct-status, queries of the remote index must answer exactly as the local one, and a prefix
# that holds no index must be refused with its URL named; flexstruct-serve must answer from the S3 index
# as the local one does and refuse to update it.
set -euo pipefail
bin=${BIN:-target/debug}
venv=${S3_VENV:-data/venv/moto}
moto_version=5.2.5
if [ ! -x "$venv/bin/moto_server" ]; then
  echo "s3-test: installing moto[server]==$moto_version into $venv (PyPI)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$moto_version"
fi
work=$(mktemp -d)
server=""
serve_pid=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
server=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.1; done

# Only this server, with throwaway keys (moto accepts any).
for v in $(env | awk -F= '/^AWS_/ { print $1 }'); do unset "$v"; done
export AWS_ACCESS_KEY_ID=flexstruct-test AWS_SECRET_ACCESS_KEY=flexstruct-test AWS_REGION=us-east-1 \
  AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true
bucket=flexstruct-test
"$venv/bin/python" - "$port" "$bucket" <<'PY'
import sys, boto3
boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}", region_name="us-east-1").create_bucket(Bucket=sys.argv[2])
PY

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
