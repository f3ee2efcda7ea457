#!/usr/bin/env bash
# The service's test with clients nobody here wrote (`make serve-test`, part of `make test`): the
# sample corpus is indexed into a temporary folder, flexstruct-serve started on a free loopback
# port, OpenAI's Python client asks it (plain and streamed), headless Chromium drives the explorer
# (Debian's chromium and chromium-driver, installed with apt-get when missing), and schemathesis
# sends every operation of the server's own OpenAPI description requests made from its schemas,
# valid and not, and fails on any 5xx (openai, selenium and schemathesis pinned, from PyPI into
# data/venv/serve-test on first use). The server is stopped by
# this script; the screenshots stay in SCREENSHOTS (a temporary folder unless given).
set -euo pipefail
bin=${BIN:-target/debug}
venv=${SERVE_VENV:-data/venv/serve-test}
openai_version=3.63.0
selenium_version=4.50.0
schemathesis_version=4.32.5
if [ ! -x "$venv/bin/schemathesis" ] || ! "$venv/bin/python" -c "import openai, selenium" 2>/dev/null; then
  echo "serve-test: installing openai==$openai_version selenium==$selenium_version schemathesis==$schemathesis_version into $venv (PyPI)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "openai==$openai_version" "selenium==$selenium_version" \
    "schemathesis==$schemathesis_version"
fi
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  echo "serve-test: installing Debian's chromium and chromium-driver"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo=sudo; fi
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
fi

work=$(mktemp -d)
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
shots=${SCREENSHOTS:-$work/screenshots}

export FLEXSTRUCT_EMBED__MODEL=hashing-64
unset FLEXSTRUCT_CONFIG FLEXSTRUCT_SERVE_READ_TOKENS FLEXSTRUCT_SERVE_WRITE_TOKENS
make --no-print-directory index CORPUS=data/sample/corpus INDEX="$work/sample" >"$work/index.log" 2>&1 \
  || { tail -n 30 "$work/index.log" >&2; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/flexstruct-serve" --index "sample=$work/sample" --listen "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
server=$!
base="http://127.0.0.1:$port"
for _ in $(seq 300); do curl -fs "$base/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fs "$base/healthz" >/dev/null || { cat "$work/serve.log" >&2; exit 1; }

export SE_OFFLINE=true  # selenium must not look for drivers or browsers to download
"$venv/bin/python" serve/tests/clients/openai_client.py "$base" || { tail -n 30 "$work/serve.log" >&2; exit 1; }
timeout 600 "$venv/bin/python" serve/tests/clients/browser.py "$base" "$shots" \
  || { tail -n 30 "$work/serve.log" >&2; exit 1; }
# Requests generated from the description, valid and malformed: none may be a server error, and
# every 4xx must be JSON (the error shape); bounded in count and time.
# (Run from the temporary folder: schemathesis keeps a cache in the folder it runs in.)
schemathesis=$(realpath "$venv/bin/schemathesis")
(cd "$work" && timeout 600 "$schemathesis" run "$base/openapi.json" --url "$base" --checks not_a_server_error \
  --max-examples 25 --seed 7 --phases examples,coverage,fuzzing --request-timeout 60 --no-color \
  >"$work/schemathesis.log" 2>&1) || { tail -n 60 "$work/schemathesis.log" >&2; tail -n 30 "$work/serve.log" >&2; exit 1; }
tail -n 3 "$work/schemathesis.log"
if [ -z "${SCREENSHOTS:-}" ]; then echo "serve-test: (set SCREENSHOTS=DIR to keep the screenshots)"; fi
