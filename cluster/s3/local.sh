#!/usr/bin/env bash
# A local S3 server for `make s3-test` and `make bench-s3`: moto_server from PyPI, installed into a
# virtual environment (S3_VENV, default data/venv/moto) on first use. Sourced; then
# `start_local_s3` starts it on a free port of 127.0.0.1 (its log in $work, a temporary folder
# the caller made; its pid in `server`), points the AWS_* variables at it alone with throwaway
# keys (moto accepts any), and creates the bucket `bucket`; `stop_local_s3` stops it and removes
# $work.
start_local_s3() {
  local venv=${S3_VENV:-data/venv/moto} moto_version=5.2.5 port
  if [ ! -x "$venv/bin/moto_server" ]; then
    echo "s3: installing moto[server]==$moto_version into $venv (PyPI)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$moto_version"
  fi
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.1; done
  for v in $(env | awk -F= '/^AWS_/ { print $1 }'); do unset "$v"; done
  export AWS_ACCESS_KEY_ID=flexstruct-test AWS_SECRET_ACCESS_KEY=flexstruct-test AWS_REGION=us-east-1 \
    AWS_ENDPOINT="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true
  bucket=flexstruct-test
  "$venv/bin/python" - "$port" "$bucket" <<'PY'
import sys, boto3
boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}", region_name="us-east-1").create_bucket(Bucket=sys.argv[2])
PY
}

stop_local_s3() {
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
