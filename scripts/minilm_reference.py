#!/usr/bin/env python3
"""Reference all-MiniLM-L6-v2 sentence embeddings computed with numpy alone.

An implementation independent of the Rust one (no candle, no torch): BERT forward pass written
out from the safetensors weights, then mean pooling over the attention mask and L2
normalisation, as sentence-transformers does for this model (max_seq_length 256).

Usage: minilm_reference.py MODEL_DIR SENTENCES.json OUT.json
(needs numpy, safetensors and tokenizers; used once to make the test fixture)
"""
import json
import math
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def embed(ids, w, config):
    def p(name):
        for prefix in ("", "bert."):
            if prefix + name in w:
                return w[prefix + name].astype(np.float64)
        raise KeyError(name)

    eps = config["layer_norm_eps"]
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    n = len(ids)
    x = p("embeddings.word_embeddings.weight")[ids]
    x = x + p("embeddings.position_embeddings.weight")[:n]
    x = x + p("embeddings.token_type_embeddings.weight")[0]
    x = layer_norm(x, p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"), eps)
    d = hidden // heads
    for layer in range(config["num_hidden_layers"]):
        pre = f"encoder.layer.{layer}."
        lin = lambda name, v: v @ p(pre + name + ".weight").T + p(pre + name + ".bias")
        q = lin("attention.self.query", x).reshape(n, heads, d).transpose(1, 0, 2)
        k = lin("attention.self.key", x).reshape(n, heads, d).transpose(1, 0, 2)
        v = lin("attention.self.value", x).reshape(n, heads, d).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        scores = scores - scores.max(-1, keepdims=True)
        attn = np.exp(scores)
        attn = attn / attn.sum(-1, keepdims=True)
        context = (attn @ v).transpose(1, 0, 2).reshape(n, hidden)
        x = layer_norm(lin("attention.output.dense", context) + x,
                       p(pre + "attention.output.LayerNorm.weight"), p(pre + "attention.output.LayerNorm.bias"), eps)
        h = gelu(lin("intermediate.dense", x))
        x = layer_norm(lin("output.dense", h) + x, p(pre + "output.LayerNorm.weight"), p(pre + "output.LayerNorm.bias"), eps)
    pooled = x.mean(0)  # one sentence, no padding: every position is in the mask
    return pooled / np.linalg.norm(pooled)


def main():
    model_dir, sentences_path, out_path = sys.argv[1:4]
    config = json.load(open(f"{model_dir}/config.json"))
    max_len = json.load(open(f"{model_dir}/sentence_bert_config.json"))["max_seq_length"]
    tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_len)
    weights = load_file(f"{model_dir}/model.safetensors")
    sentences = json.load(open(sentences_path))
    vectors = []
    for s in sentences:
        ids = tokenizer.encode(s).ids
        vectors.append([float(v) for v in embed(ids, weights, config)])
    json.dump({"model": "all-MiniLM-L6-v2", "max_seq_length": max_len, "sentences": sentences, "vectors": vectors},
              open(out_path, "w"), indent=None)


if __name__ == "__main__":
    main()
