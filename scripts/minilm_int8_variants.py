#!/usr/bin/env python3
"""Ways of running MiniLM's weight products in 8 bits with ONNX Runtime, each against fp32:
texts per second and the cosine of its vectors to fp32's, on the same texts.

    minilm_int8_variants.py MODEL_DIR TEXTS_DIR [THREADS] [ROUNDS]

TEXTS_DIR holds `make bench-embed`'s text files (generated, hyperedges, entities, chunks
.jsonl, `{"text": ...}` per line); every one there is timed. Each variant is a rewrite of the fp32
graph of scripts/minilm_onnx.py:

- dynamic: ONNX Runtime's dynamic quantization (minilm_onnx.py --int8): weights per output
  channel, each product's activations quantized with one scale for the whole batch;
- per-token: activations quantized per token (one scale per row, symmetric), int8 weights per
  output channel, MatMulInteger, the scales applied after it;
- per-token, smoothed: the same after SmoothQuant's rescaling (each input channel of a product
  divided by max|x|^a / max|w|^(1-a), a = 0.65, the weights multiplied by it; max|x| from the
  last twentieth of each file's texts, which are timed and compared too);
- per-token, smoothed, FFN down in fp32: the same with each layer's feed-forward down
  projection left in fp32 (its input, GELU's output, carries the largest channels);
- blocks of 16, int8 products: ONNX Runtime's MatMulNBits, 8-bit weights in blocks of 16 along
  the input, activations quantized per block and multiplied in int8 (accuracy_level 4);
- blocks of 32, weights only: MatMulNBits with 8-bit weights in blocks of 32, products in fp32.

ROUNDS (default 3) passes over the variants in turn, fp32 first and last in each (so its
median is over twice as many runs), each timing one pass over a file's texts after a warm-up on
a tenth of them (batch 32, sorted by length, padded per batch); prints a Markdown table of
medians (with every round) and the cosine to fp32 (min / mean over the texts). Needs numpy, onnx, onnxruntime, safetensors and tokenizers
(`make bench-embed ONNX=1`'s venv has them).
"""
import json
import pathlib
import re
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import bench_embed  # noqa: E402
import minilm_onnx  # noqa: E402

SETS = ("generated", "hyperedges", "entities", "chunks")
ALPHA = 0.65


def rewrite(model, replace):
    """Replaces each weight product for which `replace(node, weight, emit)` returns True by the
    nodes it emits; drops initializers no longer used."""
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    nodes, count = [], [0]

    def emit(kind, inputs, outputs=None, domain="", **attrs):
        count[0] += 1
        outs = outputs or [f"v{count[0]}_{kind.lower()}"]
        nodes.append(helper.make_node(kind, inputs, outs, name=f"v{count[0]}", domain=domain, **attrs))
        return outs[0]

    def const(array):
        count[0] += 1
        name = f"v{count[0]}_c"
        g.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    emit.const = const
    weights = {n.name for n in minilm_onnx.weight_products(model)}
    for n in list(g.node):
        if n.name in weights and replace(n, numpy_helper.to_array(inits[n.input[1]]), emit):
            continue
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in g.node for i in n.input}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    if any(n.domain == "com.microsoft" for n in g.node):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def dynamic(model):
    """ONNX Runtime's dynamic quantization of the graph, as `minilm_onnx.py --int8` writes it."""
    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = pathlib.Path(tmp) / "model.onnx", pathlib.Path(tmp) / "model-int8.onnx"
        onnx.save_model(model, str(fp32))
        minilm_onnx.quantize(fp32, int8)
        return onnx.load(str(int8))


def per_token(smooth=None, skip=None):
    def replace(n, w, emit):
        if skip and re.search(skip, n.name):
            return False
        x = n.input[0]
        if smooth is not None:
            s = (np.maximum(smooth[n.name], 1e-5) ** ALPHA / np.maximum(np.abs(w).max(1), 1e-5) ** (1 - ALPHA)).astype(np.float32)
            x = emit("Mul", [x, emit.const((1.0 / s).astype(np.float32))])
            w = w * s[:, None]
        w_scale = np.abs(w).max(0) / 127.0
        w_scale[w_scale == 0] = 1.0
        wq = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
        amax = emit("ReduceMax", [emit("Abs", [x])], axes=[-1], keepdims=1)
        scale = emit("Max", [emit("Div", [amax, emit.const(np.float32(127.0))]), emit.const(np.float32(1e-12))])
        # uint8 around 128: the operand order ONNX Runtime's VNNI kernel takes (u8 × s8)
        shifted = emit("Add", [emit("Round", [emit("Div", [x, scale])]), emit.const(np.float32(128.0))])
        xq = emit("Cast", [shifted], to=TensorProto.UINT8)
        product = emit("MatMulInteger", [xq, emit.const(wq), emit.const(np.uint8(128))])
        y = emit("Mul", [emit("Cast", [product], to=TensorProto.FLOAT), scale])
        emit("Mul", [y, emit.const(w_scale.astype(np.float32))], outputs=list(n.output))
        return True

    return replace


def blocks(block, accuracy_level):
    def replace(n, w, emit):
        k, cols = w.shape
        wb = w.T.reshape(cols, k // block, block)
        scale = np.abs(wb).max(axis=2) / 127.0
        scale[scale == 0] = 1.0
        q = (np.clip(np.round(wb / scale[:, :, None]), -128, 127) + 128).astype(np.uint8)
        emit(
            "MatMulNBits",
            [n.input[0], emit.const(q), emit.const(scale.astype(np.float32).reshape(-1))],
            outputs=list(n.output),
            domain="com.microsoft",
            K=k,
            N=cols,
            bits=8,
            block_size=block,
            accuracy_level=accuracy_level,
        )
        return True

    return replace


def activation_max(model, tokenizer, texts):
    """Per weight product, the largest |x| of each input channel over `texts`."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    products = minilm_onnx.weight_products(model)
    for n in products:
        probe.graph.output.append(helper.make_tensor_value_info(n.input[0], TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    found = {}
    for _, feed in bench_embed.padded_batches(tokenizer, texts, 1):
        for n, x in zip(products, session.run([n.input[0] for n in products], feed)):
            m = np.abs(x).reshape(-1, x.shape[-1]).max(0)
            found[n.name] = np.maximum(found.get(n.name, m), m)
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    model_dir, texts_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    sets = {}
    for name in SETS:
        path = texts_dir / f"{name}.jsonl"
        if path.exists():
            sets[name] = [json.loads(line)["text"] for line in path.open(encoding="utf-8") if line.strip()]
    if not sets:
        sys.exit(f"minilm_int8_variants: no {', '.join(SETS)} .jsonl in {texts_dir}")
    tokenizer = bench_embed.onnx_tokenizer(model_dir)
    fp32 = minilm_onnx.build(model_dir)
    calibration = [t for texts in sets.values() for t in texts[-max(10, len(texts) // 20) :]]
    smooth = activation_max(fp32, tokenizer, calibration)
    variants = {
        "fp32": lambda m: m,
        "dynamic (minilm_onnx.py --int8)": dynamic,
        "per-token": lambda m: rewrite(m, per_token()),
        "per-token, smoothed": lambda m: rewrite(m, per_token(smooth)),
        "per-token, smoothed, FFN down in fp32": lambda m: rewrite(m, per_token(smooth, r"layer\.\d\.output\.dense")),
        "blocks of 16, int8 products": lambda m: rewrite(m, blocks(16, 4)),
        "blocks of 32, weights only": lambda m: rewrite(m, blocks(32, 0)),
    }
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    sessions = {}
    for name, make in variants.items():
        copy = onnx.ModelProto()
        copy.CopyFrom(fp32)
        model = make(copy)
        sessions[name] = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    rates = {(v, s): [] for v in sessions for s in sets}
    cosines, reference = {}, {}
    order = list(sessions) + ["fp32"]
    for _ in range(rounds):
        for set_name, texts in sets.items():
            for v in order:
                bench_embed.onnx_encode(sessions[v], tokenizer, texts[: max(64, len(texts) // 10)])
                started = time.perf_counter()
                vectors = bench_embed.onnx_encode(sessions[v], tokenizer, texts)
                rates[(v, set_name)].append(len(texts) / (time.perf_counter() - started))
                reference.setdefault(set_name, vectors)
                cos = (vectors * reference[set_name]).sum(1)
                cosines[(v, set_name)] = (cos.min(), cos.mean())
    print(f"ONNX Runtime {ort.__version__}, {threads} threads, {rounds} rounds, batch 32; texts/s median (rounds), cosine to fp32 min / mean")
    print("| variant | " + " | ".join(f"{s} ({len(t)}) texts/s | / fp32 | cosine" for s, t in sets.items()) + " |")
    print("|---|" + "---|---:|---|" * len(sets))
    for v in sessions:
        cells = []
        for s in sets:
            r = rates[(v, s)]
            ratio = statistics.median(r) / statistics.median(rates[("fp32", s)])
            lo, mean = cosines[(v, s)]
            cells.append(f"{statistics.median(r):.0f} ({', '.join(f'{x:.0f}' for x in r)}) | {ratio:.2f}× | {lo:.6f} / {mean:.6f}")
        print(f"| {v} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
