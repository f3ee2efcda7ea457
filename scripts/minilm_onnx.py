#!/usr/bin/env python3
"""all-MiniLM-L6-v2 as an ONNX graph, written out from the verified safetensors weights, and its
int8 form for ONNX Runtime.

    minilm_onnx.py MODEL_DIR OUT_DIR [--int8]

writes OUT_DIR/model.onnx (the encoder, mean pooling over the attention mask and L2
normalisation, exactly what the Rust embedder computes; `embed.runtime = "onnx"` runs it) and,
with --int8, OUT_DIR/model-int8.onnx (the same graph with every weight product quantized by ONNX
Runtime's dynamic quantization: 8-bit weights per output channel, int8 with VNNI and uint8
without, 8-bit activations quantized per product at run time; `make bench-embed ONNX=1`
measures it, nothing else uses it).

Inputs: `input_ids` and `attention_mask`, int64 [batch, tokens]; output: `sentence_embedding`,
float32 [batch, 384]. The graph is built node by node from the model's config.json (no PyTorch,
no export tracer): the same arithmetic as scripts/minilm_reference.py, batched and masked.
Needs numpy, safetensors and onnx (and onnxruntime for --int8).
"""
import json
import math
import pathlib
import sys

import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper, save_model
from safetensors.numpy import load_file

OPSET = 17


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, array, hint="c"):
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def op(self, kind, inputs, hint=None, **attrs):
        out = self.name(hint or kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out


def build(model_dir):
    config = json.loads((model_dir / "config.json").read_text())
    w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    hidden, heads, eps = config["hidden_size"], config["num_attention_heads"], config["layer_norm_eps"]
    d = hidden // heads
    g = Graph()

    def linear(x, prefix):
        # PyTorch stores `out × in`; MatMul wants `in × out`
        y = g.op("MatMul", [x, g.const(w[prefix + ".weight"].T.copy(), prefix + ".weight")], prefix)
        return g.op("Add", [y, g.const(w[prefix + ".bias"], prefix + ".bias")])

    def norm(x, prefix):
        return g.op("LayerNormalization", [x, g.const(w[prefix + ".weight"]), g.const(w[prefix + ".bias"])], axis=-1, epsilon=eps)

    # embeddings: word + position + token type 0
    x = g.op("Gather", [g.const(w["embeddings.word_embeddings.weight"], "word"), "input_ids"])
    length = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(np.array(1, dtype=np.int64))], axis=0)
    positions = g.op("Range", [g.const(np.array(0, dtype=np.int64)), length, g.const(np.array(1, dtype=np.int64))])
    x = g.op("Add", [x, g.op("Gather", [g.const(w["embeddings.position_embeddings.weight"], "position"), positions])])
    x = g.op("Add", [x, g.const(w["embeddings.token_type_embeddings.weight"][0], "token_type")])
    x = norm(x, "embeddings.LayerNorm")

    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    # padding positions get −10⁴ added to their scores, as BERT's extended mask does
    bias = g.op("Mul", [g.op("Sub", [g.const(np.array(1.0, dtype=np.float32)), mask]), g.const(np.array(-1e4, dtype=np.float32))])
    bias = g.op("Unsqueeze", [bias, g.const(np.array([1, 2], dtype=np.int64))])  # [batch, 1, 1, tokens]
    split_heads = g.const(np.array([0, 0, heads, d], dtype=np.int64))
    join_heads = g.const(np.array([0, 0, hidden], dtype=np.int64))
    scale = g.const(np.array(1.0 / math.sqrt(d), dtype=np.float32))
    for layer in range(config["num_hidden_layers"]):
        pre = f"encoder.layer.{layer}."

        def heads_of(name, perm):
            return g.op("Transpose", [g.op("Reshape", [linear(x, pre + name), split_heads])], perm=perm)

        q = heads_of("attention.self.query", [0, 2, 1, 3])
        k = heads_of("attention.self.key", [0, 2, 3, 1])
        v = heads_of("attention.self.value", [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), bias])
        context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        context = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), join_heads])
        x = norm(g.op("Add", [linear(context, pre + "attention.output.dense"), x]), pre + "attention.output.LayerNorm")
        h = linear(x, pre + "intermediate.dense")
        erf = g.op("Erf", [g.op("Div", [h, g.const(np.array(math.sqrt(2.0), dtype=np.float32))])])
        h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [erf, g.const(np.array(1.0, dtype=np.float32))])]), g.const(np.array(0.5, dtype=np.float32))])
        x = norm(g.op("Add", [linear(h, pre + "output.dense"), x]), pre + "output.LayerNorm")

    # mean over the tokens in the mask, then unit length
    m = g.op("Unsqueeze", [mask, g.const(np.array([-1], dtype=np.int64))])
    axes = g.const(np.array([1], dtype=np.int64))
    total = g.op("ReduceSum", [g.op("Mul", [x, m]), axes], keepdims=0)
    count = g.op("Max", [g.op("ReduceSum", [m, axes], keepdims=0), g.const(np.array(1e-9, dtype=np.float32))])
    mean = g.op("Div", [total, count])
    length = g.op("Max", [g.op("ReduceL2", [mean], axes=[-1], keepdims=1), g.const(np.array(1e-12, dtype=np.float32))])
    g.nodes.append(helper.make_node("Div", [mean, length], ["sentence_embedding"]))

    ints = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"])
    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [ints("input_ids"), ints("attention_mask")],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="flexstruct")
    model.ir_version = 8
    checker.check_model(model)
    return model


def weight_products(model):
    """The graph's products of an activation by a weight (MatMul nodes whose second input is an
    initializer): the encoder's 36 linear layers."""
    weights = {i.name for i in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]


def vnni():
    """Whether this processor has 8-bit dot products that sum in 32 bits (AVX-512 VNNI or
    AVX-VNNI)."""
    try:
        flags = pathlib.Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def quantize(fp32, int8):
    """Every weight product (the 36 MatMuls of the encoder) as ONNX Runtime's dynamic int8
    product; the embedding lookups and the attention's activation products stay fp32. Weights per
    output channel, int8 where the processor has VNNI (its 8-bit products sum in 32 bits), uint8
    otherwise: on AVX2 without VNNI the int8-weight kernel sums pairs of products in 16 bits and
    saturates unless weights lose a bit (`reduce_range`), and of the variants measured there
    (CHANGELOG.md, measurement history: "ONNX Runtime, and int8 on an AVX2 processor") uint8 is closest to fp32."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    products = [n.name for n in weight_products(onnx.load(str(fp32)))]
    weight_type = QuantType.QInt8 if vnni() else QuantType.QUInt8
    quantize_dynamic(str(fp32), str(int8), per_channel=True, reduce_range=False, weight_type=weight_type, nodes_to_quantize=products)
    return len(products), weight_type.name


def main():
    args = [a for a in sys.argv[1:] if a != "--int8"]
    if len(args) != 2:
        sys.exit(__doc__)
    model_dir, out_dir = pathlib.Path(args[0]), pathlib.Path(args[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / "model.onnx"
    save_model(build(model_dir), str(fp32))
    print(f"onnx: {fp32} written")
    if "--int8" in sys.argv[1:]:
        int8 = out_dir / "model-int8.onnx"
        products, weight_type = quantize(fp32, int8)
        print(f"onnx: {int8} ({products} products in int8, {weight_type} weights) written")


if __name__ == "__main__":
    main()
