#!/usr/bin/env bash
# make bench-embed: MiniLM throughput of our embedder against PyTorch + sentence-transformers on
# the same texts, side by side on this machine.
#
# Usage: scripts/bench-embed.sh INDEX [OUT] — texts: 2,000 (GENERATED) generated 30-word sentences, and from
# INDEX's kb up to 1,500 hyperedge texts, 600 entity texts and 200 chunks, as the embed stage
# writes them (hyperedges with their entities' names, entities as name and whole summary — the
# stage cuts summaries at embed.entity_summary_words, 40 by default; whole here, so that the
# rows compare with earlier runs and keep long texts in the sample). For each
# set (SETS, default all four: generated hyperedges entities chunks) and for 1 and 2 threads (THREADS, default "1 2"), ROUNDS (3) alternating runs of each side, each in a fresh process
# timing one run over all the texts after a warm-up on a tenth of them; the median of the rounds is reported, with the ratio ours / PyTorch, and
# the cosine of our vectors to PyTorch's; first, what each kind of unit of INDEX costs in MiniLM
# tokens (all its units; texts, distinct texts, tokens, and tokens if cut at 128 or 64). PyTorch runs from a virtual environment made here
# (BENCH_VENV, default data/venv/bench-embed; pinned versions from PyPI, kept for reruns: delete
# the folder to throw it away). Writes OUT (default data/eval/bench-embed)/bench-embed.md and .json.
# RUNTIME=onnx runs our side through ONNX Runtime (`embed.runtime = "onnx"`, `make onnx` first).
# ONNX=1 adds two more sides to every round: ONNX Runtime on the graph scripts/minilm_onnx.py
# writes from the same weights, fp32 and int8 (pinned onnx and onnxruntime from PyPI into the same
# venv), with their ratios to PyTorch, int8 against ORT's fp32, and the cosine of the int8 vectors
# to ours.
set -euo pipefail
cd "$(dirname "$0")/.."
index=${1:?usage: bench-embed.sh INDEX [OUT]}
out=${2:-data/eval/bench-embed}
venv=${BENCH_VENV:-data/venv/bench-embed}
rounds=${ROUNDS:-3}
sets=${SETS:-generated hyperedges entities chunks}
thread_counts=${THREADS:-1 2}
generated=${GENERATED:-2000}
model=data/models/all-MiniLM-L6-v2
bin=${BIN:-target/debug}
ours=$bin/examples/embed_throughput
sql=$bin/flexstruct-sql
torch_pin="torch==2.15.0"
st_pin="sentence-transformers==6.2.0"
onnx_pins=("onnx==1.23.2" "onnxruntime==1.32.0" "safetensors==0.8.0")
onnx=${ONNX:-0}
runtime=${RUNTIME:-candle}
for set in $sets; do
  case $set in
    generated | hyperedges | entities | chunks) ;;
    *) echo "bench-embed: unknown set '$set' in SETS (generated, hyperedges, entities, chunks)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1

if ! "$venv/bin/python" -c "import torch, sentence_transformers" 2>/dev/null; then
  echo "bench-embed: installing $torch_pin and $st_pin into $venv (PyPI; a few GB the first time)"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet "$torch_pin" "$st_pin"
fi
versions=$("$venv/bin/python" -c "import torch, sentence_transformers as s; print(f'torch {torch.__version__}, sentence-transformers {s.__version__}')")
if [ "$onnx" = 1 ]; then
  if ! "$venv/bin/python" -c "import onnx, onnxruntime, safetensors" 2>/dev/null; then
    echo "bench-embed: installing ${onnx_pins[*]} into $venv (PyPI)"
    "$venv/bin/python" -m pip install --quiet "${onnx_pins[@]}"
  fi
  "$venv/bin/python" scripts/minilm_onnx.py "$model" "$out/onnx" --int8 2>&1 | grep -v 'pre-processing before quantization'
  ln -sf model.onnx "$out/onnx/model-fp32.onnx"
  ort_version=$("$venv/bin/python" -c "import onnxruntime; print(f'; ORT = ONNX Runtime {onnxruntime.__version__} on scripts/minilm_onnx.py graphs (batch 32)')")
fi

# The texts, the same files for both sides.
"$ours" generate "$generated" > "$out/generated.jsonl"
"$sql" --index "$index" --format jsonl \
  "SELECT CASE WHEN count(e.name) = 0 THEN h.text ELSE h.text || chr(10) || 'Entities: ' || string_agg(e.name, '; ') END AS text
   FROM kb.hyperedges h LEFT JOIN kb.hyperedge_entities he ON h.hyperedge_id = he.hyperedge_id
   LEFT JOIN kb.entities e ON he.entity_id = e.entity_id
   GROUP BY h.hyperedge_id, h.text ORDER BY h.hyperedge_id LIMIT 1500" > "$out/hyperedges.jsonl"
"$sql" --index "$index" --format jsonl \
  "SELECT name || ': ' || summary AS text FROM kb.entities ORDER BY entity_id LIMIT 600" > "$out/entities.jsonl"
"$sql" --index "$index" --format jsonl \
  "SELECT text FROM kb.chunks ORDER BY doc_id, chunk_idx LIMIT 200" > "$out/chunks.jsonl"

# What each kind of unit costs: every unit of the kb, as the embed stage writes its text.
"$sql" --index "$index" --format jsonl \
  "SELECT 'entity' AS unit, name || ': ' || summary AS text FROM kb.entities
   UNION ALL SELECT 'hyperedge', CASE WHEN count(e.name) = 0 THEN h.text ELSE h.text || chr(10) || 'Entities: ' || string_agg(e.name, '; ') END
   FROM kb.hyperedges h LEFT JOIN kb.hyperedge_entities he ON h.hyperedge_id = he.hyperedge_id
   LEFT JOIN kb.entities e ON he.entity_id = e.entity_id GROUP BY h.hyperedge_id, h.text
   UNION ALL SELECT 'edge', d.text || chr(10) || 'Entities: ' || a.name || '; ' || b.name FROM kb.edges d
   JOIN kb.entities a ON d.source_id = a.entity_id JOIN kb.entities b ON d.target_id = b.entity_id
   UNION ALL SELECT 'chunk', text FROM kb.chunks" > "$out/units.jsonl"
"$venv/bin/python" scripts/bench_embed.py tokens "$model" "$out/units.jsonl" | tee "$out/tokens.md"

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
rate() { python3 -c "import json, sys; r = json.loads(sys.stdin.read()); print(r['texts'] / r['seconds'])"; }

if [ "$onnx" = 1 ]; then
  {
    echo "| texts | n | threads | ours texts/s (rounds) | PyTorch texts/s (rounds) | ours / PyTorch | cosine ours–PyTorch (min / mean) | ORT fp32 texts/s (rounds) | ORT int8 texts/s (rounds) | ORT fp32 / PyTorch | int8 / PyTorch | int8 / ORT fp32 | cosine ORT fp32–ours (min) | cosine int8–ours (min / mean) |"
    echo "|---|---:|---:|---|---|---:|---|---|---|---:|---:|---:|---|---|"
  } | tee "$out/bench-embed.md"
else
  {
    echo "| texts | n | threads | ours texts/s (rounds) | PyTorch texts/s (rounds) | ours / PyTorch | cosine ours–PyTorch (min / mean) |"
    echo "|---|---:|---:|---|---|---:|---|"
  } | tee "$out/bench-embed.md"
fi
json="["
for set in $sets; do
  n=$(wc -l < "$out/$set.jsonl")
  for threads in $thread_counts; do
    ours_rates=(); torch_rates=(); fp32_rates=(); int8_rates=()
    for ((r = 1; r <= rounds; r++)); do
      ours_rates+=("$(RAYON_NUM_THREADS=$threads CANDLE_NUM_THREADS=1 FLEXSTRUCT_EMBED__RUNTIME=$runtime "$ours" time "$out/$set.jsonl" 64 "$out/ours.f32" | rate)")
      torch_rates+=("$("$venv/bin/python" scripts/bench_embed.py time "$model" "$out/$set.jsonl" "$threads" 32 "$out/torch.f32" | rate)")
      if [ "$onnx" = 1 ]; then
        for precision in fp32 int8; do
          r_=$("$venv/bin/python" scripts/bench_embed.py time-onnx "$model" "$out/onnx/model-$precision.onnx" "$out/$set.jsonl" "$threads" 32 "$out/ort-$precision.f32" | rate)
          if [ $precision = fp32 ]; then fp32_rates+=("$r_"); else int8_rates+=("$r_"); fi
        done
      fi
    done
    o=$(printf '%s\n' "${ours_rates[@]}" | median)
    t=$(printf '%s\n' "${torch_rates[@]}" | median)
    cosine() {
      "$venv/bin/python" -c "
import numpy as np
a = np.fromfile('$1', '<f4').reshape(-1, 384); b = np.fromfile('$2', '<f4').reshape(-1, 384)
c = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
print(f'{c.min():.6f} / {c.mean():.6f}')"
    }
    fmt() { printf '%s\n' "$@" | awk '{printf "%s%.0f", (NR > 1 ? ", " : ""), $1}'; }
    ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
    line="| $set | $n | $threads | $(printf '%.0f' "$o") ($(fmt "${ours_rates[@]}")) | $(printf '%.0f' "$t") ($(fmt "${torch_rates[@]}")) | $(ratio "$o" "$t")× | $(cosine "$out/ours.f32" "$out/torch.f32") |"
    record="{\"texts\":\"$set\",\"n\":$n,\"threads\":$threads,\"ours\":$o,\"pytorch\":$t,\"ratio\":$(ratio "$o" "$t")"
    if [ "$onnx" = 1 ]; then
      f=$(printf '%s\n' "${fp32_rates[@]}" | median)
      i=$(printf '%s\n' "${int8_rates[@]}" | median)
      line+=" $(printf '%.0f' "$f") ($(fmt "${fp32_rates[@]}")) | $(printf '%.0f' "$i") ($(fmt "${int8_rates[@]}")) | $(ratio "$f" "$t")× | $(ratio "$i" "$t")× | $(ratio "$i" "$f")× | $(cosine "$out/ours.f32" "$out/ort-fp32.f32" | cut -d' ' -f1) | $(cosine "$out/ours.f32" "$out/ort-int8.f32") |"
      record+=",\"ort_fp32\":$f,\"ort_int8\":$i"
    fi
    echo "$line" | tee -a "$out/bench-embed.md"
    json+="$record},"
  done
done
echo "${json%,}]" > "$out/bench-embed.json"
echo "bench-embed: ours = flexstruct's MiniLM (runtime $runtime, batch 64, $bin); PyTorch = $versions (batch 32, its default)${ort_version:-}; $rounds rounds, median; $out/bench-embed.md"
