#!/usr/bin/env python3
"""The Python side of `make bench-embed` (scripts/bench-embed.sh).

time MODEL_DIR TEXTS.jsonl THREADS BATCH [VECTORS.f32]
    PyTorch + sentence-transformers: loads all-MiniLM-L6-v2 from the project's verified model
    folder (the same weights the Rust embedder reads), embeds the first tenth (at least 64) of
    the texts of a JSON-lines file (`{"text": ...}`) to warm up, then all of them timed, on
    THREADS threads, and prints `{"texts": n, "seconds": s}`; given a path, it writes the timed
    run's vectors there as little-endian f32, row after row (ours writes the same layout).

time-onnx MODEL_DIR MODEL.onnx TEXTS.jsonl THREADS BATCH [VECTORS.f32]
    The same with ONNX Runtime on a graph of scripts/minilm_onnx.py (fp32 or int8): the model
    folder's tokenizer at its 256-token limit, texts sorted by length and padded per batch as
    sentence-transformers does, THREADS intra-op threads.

tokens MODEL_DIR UNITS.jsonl
    What each kind of unit costs to embed: per `unit` of the file's `{"unit", "text"}` lines, the
    texts, the distinct texts, MiniLM's tokens at its 256-token limit ([CLS] and [SEP] included),
    their share, the texts at the limit, and the tokens if texts were cut at 128 or 64 tokens.
    Prints a Markdown table.
"""
import json
import sys
import time


def time_side(model_dir, path, threads, batch, vectors_out=None):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    with open(path, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    model = SentenceTransformer(model_dir, device="cpu")
    with torch.inference_mode():
        model.encode(texts[: max(64, len(texts) // 10)], batch_size=batch, normalize_embeddings=True)
        started = time.perf_counter()
        vectors = model.encode(texts, batch_size=batch, normalize_embeddings=True)
        seconds = time.perf_counter() - started
    if vectors_out:
        vectors.astype("<f4").tofile(vectors_out)
    print(json.dumps({"texts": len(texts), "seconds": seconds}))


def onnx_tokenizer(model_dir):
    """The model folder's tokenizer at MiniLM's 256-token limit, unpadded."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=256)
    return tokenizer


def padded_batches(tokenizer, texts, batch):
    """The texts as ONNX Runtime's inputs, as sentence-transformers batches them: sorted by
    length, longest first, and padded per batch; yields (the texts' indexes, the inputs)."""
    import numpy as np

    ids = [e.ids for e in tokenizer.encode_batch(texts)]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    for start in range(0, len(order), batch):
        rows = order[start : start + batch]
        width = max(len(ids[i]) for i in rows)
        input_ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for r, i in enumerate(rows):
            input_ids[r, : len(ids[i])] = ids[i]
            mask[r, : len(ids[i])] = 1
        yield rows, {"input_ids": input_ids, "attention_mask": mask}


def onnx_encode(session, tokenizer, texts, batch=32):
    """The unit vectors of `texts` from an ONNX Runtime session on a scripts/minilm_onnx.py graph."""
    import numpy as np

    vectors = np.zeros((len(texts), 384), np.float32)
    for rows, feed in padded_batches(tokenizer, texts, batch):
        vectors[rows] = session.run(None, feed)[0]
    return vectors


def time_onnx(model_dir, onnx_path, path, threads, batch, vectors_out=None):
    import onnxruntime as ort

    tokenizer = onnx_tokenizer(model_dir)
    with open(path, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    onnx_encode(session, tokenizer, texts[: max(64, len(texts) // 10)], batch)
    started = time.perf_counter()
    vectors = onnx_encode(session, tokenizer, texts, batch)
    seconds = time.perf_counter() - started
    if vectors_out:
        vectors.astype("<f4").tofile(vectors_out)
    print(json.dumps({"texts": len(texts), "seconds": seconds}))


def tokens(model_dir, path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    by_unit = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                by_unit.setdefault(row["unit"], []).append(row["text"])
    rows = []
    for unit, texts in by_unit.items():
        lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
        rows.append(
            (
                unit,
                len(texts),
                len(set(texts)),
                sum(min(n, 256) for n in lengths),
                sum(n >= 256 for n in lengths),
                sum(min(n, 128) for n in lengths),
                sum(min(n, 64) for n in lengths),
            )
        )
    total = sum(r[3] for r in rows)
    print("| unit | texts | distinct | tokens (≤ 256 each) | share | mean | at the limit | cut at 128 | cut at 64 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for unit, n, distinct, toks, full, t128, t64 in rows:
        print(
            f"| {unit} | {n:,} | {distinct:,} | {toks:,} | {100 * toks / total:.1f} % | {toks / n:.1f} | {full:,} | {t128:,} | {t64:,} |"
        )
    print(f"| all | {sum(r[1] for r in rows):,} | {sum(r[2] for r in rows):,} | {total:,} | 100 % | | | {sum(r[5] for r in rows):,} | {sum(r[6] for r in rows):,} |")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "time":
        time_side(args[0], args[1], int(args[2]), int(args[3]), args[4] if len(args) > 4 else None)
    elif command == "time-onnx":
        time_onnx(args[0], args[1], args[2], int(args[3]), int(args[4]), args[5] if len(args) > 5 else None)
    elif command == "tokens":
        tokens(args[0], args[1])
    else:
        sys.exit(f"unknown command {command}: time, time-onnx or tokens")
