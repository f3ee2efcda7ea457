#!/usr/bin/env bash
# make onnx: what `embed.runtime = "onnx"` needs beside the MiniLM weights (`make model`):
# - ONNX Runtime's shared library, taken from the onnxruntime wheel on PyPI (pinned, the wheel's
#   checksum verified) into data/models/onnxruntime/libonnxruntime.so;
# - the MiniLM graph, written by scripts/minilm_onnx.py from the verified safetensors weights into
#   data/models/all-MiniLM-L6-v2/model.onnx, in a virtual environment with pinned onnx, numpy and
#   safetensors (ONNX_VENV, default data/venv/onnx; kept for reruns).
# Does nothing when both are there and verify. The pinned wheel is Linux x86-64's: elsewhere it
# says so and fetches nothing, and embed.runtime = "auto" runs MiniLM in candle (the same vectors).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -sm)" != "Linux x86_64" ]; then
  echo "onnx: the pinned ONNX Runtime is for Linux x86_64, not $(uname -sm): skipped (embed.runtime = \"auto\" runs candle)"
  exit 0
fi
lib_dir=data/models/onnxruntime
lib=$lib_dir/libonnxruntime.so
model=data/models/all-MiniLM-L6-v2
graph=$model/model.onnx
venv=${ONNX_VENV:-data/venv/onnx}
wheel="onnxruntime==1.32.0"
wheel_sha=5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d
lib_sha=6c1585d1bbf45b0712ea4a21b705c5fcb4ba04ff2e30f1fbf81a49faf658638f
graph_sha=970f3d6e0506ea8f330351eacf3141ed35ef21399fccec1d35d172b27c90fd87
pins=("onnx==1.23.2" "protobuf==7.36.2" "numpy==2.4.6" "safetensors==0.8.0")

sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$lib" ] && [ "$(sha "$lib")" = "$lib_sha" ]; then
  echo "onnx: $lib is present and verified"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "onnx: downloading $wheel from PyPI"
  # The same wheel whatever this machine's Python: the library inside does not depend on it.
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 "$wheel" -d "$tmp"
  python3 - "$tmp" "$lib" "$wheel_sha" <<'PY'
import hashlib, pathlib, sys, zipfile
tmp, lib, wheel_sha = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
wheel = next(tmp.glob("onnxruntime-*.whl"))
got = hashlib.sha256(wheel.read_bytes()).hexdigest()
if got != wheel_sha:
    sys.exit(f"onnx: checksum mismatch for {wheel.name}: expected {wheel_sha}, got {got}")
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.startswith("onnxruntime/capi/libonnxruntime.so."))
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(z.read(name))
PY
  if [ "$(sha "$lib")" != "$lib_sha" ]; then
    echo "onnx: $lib does not match its checksum" >&2
    exit 1
  fi
  echo "onnx: $lib ready"
fi

if [ -f "$graph" ] && [ "$(sha "$graph")" = "$graph_sha" ]; then
  echo "onnx: $graph is present and verified"
else
  scripts/fetch-model.sh > /dev/null
  if ! "$venv/bin/python" -c "import onnx, numpy, safetensors" 2>/dev/null; then
    echo "onnx: installing ${pins[*]} into $venv (PyPI)"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "${pins[@]}"
  fi
  "$venv/bin/python" scripts/minilm_onnx.py "$model" "$model"
  if [ "$(sha "$graph")" != "$graph_sha" ]; then
    echo "onnx: $graph does not match its checksum ($(sha "$graph")): other onnx or numpy versions in $venv?" >&2
    exit 1
  fi
fi
