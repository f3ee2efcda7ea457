#!/usr/bin/env python3
"""What could a re-ranker give? A ceiling, outside the engine.

    rerank_ceiling.py INDEX QUESTIONS_DIR [CANDIDATES ...]

Ranks INDEX's hyperedges for every question of QUESTIONS_DIR/questions.jsonl by the cosine of
the index's MiniLM vectors and gives them as the `sentence-window` strategy does (each with its
±2 neighbours, what overlaps merged, packed best first into 1,100 and 2,234 tokens; see
probe_common.py). Then it puts in place of a re-ranker one that knows the answer:

- `oracle@N`: the first N seeds re-ordered by how many of the gold answer's content words their
  window holds (the best any re-ranker that scores each piece on its own could do with the same
  candidates, the rest after them as before), packed the same way;
- `cover@N`: the answer's words covered greedily, each time the window among the first N that
  adds the most of them per token — not a ranking at all, the ceiling of choosing from those
  candidates.

It prints answer-token recall (the engine's measure) per budget and half (`--split` tune and
test, as `flexstruct-eval`), and each oracle's paired bootstrap interval against MiniLM's order.
CANDIDATES defaults to 20 40 200.

Needs numpy, pyarrow, onnxruntime and tokenizers (`python3 -m venv data/venv/probe &&
data/venv/probe/bin/pip install numpy pyarrow onnxruntime tokenizers`) and `make onnx` (MiniLM's
ONNX graph, which gives each question its unit-length vector).
"""
import json
import os
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe_common import BUDGETS, HEADER_TOKENS, MINILM, Kb, answer_words, bootstrap, split_of  # noqa: E402


def embed(texts):
    """Unit-length MiniLM vectors of `texts` from the project's ONNX graph (pooled in the graph)."""
    tokenizer = Tokenizer.from_file(f"{MINILM}/tokenizer.json")
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()
    session = ort.InferenceSession(f"{MINILM}/model.onnx")
    encoded = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64)}
    if "token_type_ids" in [i.name for i in session.get_inputs()]:
        feeds["token_type_ids"] = np.zeros_like(ids)
    vectors = session.run(None, feeds)[0]
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def recall_of(kb, rows, words):
    got = set().union(*(kb.words(r) for r in rows)) if rows else set()
    return len(got & words) / len(words)


def cover(kb, seeds, budget, tokens, words):
    """Greedy: each time the window of `seeds` adding the most answer words per token."""
    taken, used, got = set(), 0, set()
    while True:
        best = None
        for row in seeds:
            new = [r for r in kb.window(row) if r not in taken]
            cost = sum(tokens[r] for r in new) + HEADER_TOKENS
            if not new or used + cost > budget:
                continue
            gain = len(set().union(*(kb.words(r) for r in new)) & words - got) / cost
            if gain > 0 and (best is None or gain > best[0]):
                best = (gain, new, cost)
        if best is None:
            return len(got) / len(words)
        _, new, cost = best
        taken.update(new)
        used += cost
        got |= set().union(*(kb.words(r) for r in new)) & words


def main(index, questions_dir, candidates):
    kb = Kb(index)
    tokenizer = Tokenizer.from_file(f"{MINILM}/tokenizer.json")
    tokenizer.no_truncation()  # counted, not embedded: no 256-token limit, and no padding
    tokenizer.no_padding()
    tokens = [len(e.ids) - 2 for e in tokenizer.encode_batch(kb.texts)]
    with open(os.path.join(questions_dir, "questions.jsonl"), encoding="utf-8") as f:
        questions = [json.loads(line) for line in f if line.strip()]
    scores = embed([q["question"] for q in questions]) @ kb.vectors.T
    results = {}
    for i, q in enumerate(questions):
        golds = answer_words(q["answers"])
        if not golds:
            continue
        ranked = list(np.argsort(-scores[i])[: max(candidates + [400])])
        window_words = {r: set().union(*(kb.words(x) for x in kb.window(r))) for r in ranked[: max(candidates)]}
        for budget in BUDGETS:
            row = {"MiniLM": max(recall_of(kb, kb.packed(ranked, budget, tokens), g) for g in golds)}
            for n in candidates:
                best_oracle = best_cover = 0.0
                for g in golds:
                    head = sorted(ranked[:n], key=lambda r: -len(window_words[r] & g))
                    best_oracle = max(best_oracle, recall_of(kb, kb.packed(head + ranked[n:], budget, tokens), g))
                    best_cover = max(best_cover, cover(kb, ranked[:n], budget, tokens, g))
                row[f"oracle@{n}"] = best_oracle
                row[f"cover@{n}"] = best_cover
            results.setdefault((budget, split_of(q["id"])), {})[q["id"]] = row
    for (budget, split), per_question in sorted(results.items()):
        rows = list(per_question.values())
        print(f"{budget} tokens, {split} half ({len(rows)} questions):")
        for name in rows[0]:
            line = f"  {name:<12} {100 * np.mean([r[name] for r in rows]):6.2f}"
            if name != "MiniLM":
                low, high = bootstrap([r[name] - r["MiniLM"] for r in rows])
                line += f"  − MiniLM [{low:+.2f}, {high:+.2f}]"
            print(line, flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], [int(n) for n in sys.argv[3:]] or [20, 40, 200])
