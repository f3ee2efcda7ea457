"""What the evaluation probes outside the engine share (scripts/encoder_probe.py,
scripts/rerank_ceiling.py): the engine's answer-token recall, its tune/test split, an index's
hyperedges with their reading order, the sentence-window packing, a paired bootstrap.

Token counts are MiniLM word pieces of the text plus 12 a passage for its header line, so the
probes' figures sit near, not on, the engine's (which counts cl100k tokens of rendered lines).
"""
import glob
import hashlib

import numpy as np
import pyarrow.parquet as pq

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


def answer_words(golds):
    """The content words of each gold answer that has any (what answer-token recall counts)."""
    words = [{w for w in normalise(gold) if w not in STOP_WORDS} for gold in golds]
    return [w for w in words if w]


def answer_token_recall(context_words, golds):
    """The engine's answer-token recall of a context's words: the best over the gold answers."""
    best = None
    for words in answer_words(golds):
        recall = len(words & context_words) / len(words)
        best = recall if best is None else max(best, recall)
    return best


def split_of(question_id):
    """`tune` or `test`, as `flexstruct-eval --split`: the parity of the id's SHA-256's first 64 bits."""
    first = int.from_bytes(hashlib.sha256(question_id.encode()).digest()[:8], "big")
    return "tune" if first % 2 == 0 else "test"


class Kb:
    """An index's hyperedges (ids, texts, MiniLM vectors) and each one's place in its document."""

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
        self._words = None

    def window(self, row):
        """The rows of `row`'s window: itself and its ±WINDOW neighbours in its document."""
        run, at = self.runs[self.doc_of[row]], self.position[row]
        return run[max(0, at - WINDOW) : at + WINDOW + 1]

    def words(self, row):
        """The normalised words of one hyperedge's text."""
        if self._words is None:
            self._words = [set(normalise(t)) for t in self.texts]
        return self._words[row]

    def packed(self, ranked, budget, tokens):
        """The rows of the sentence-window context of `ranked` seeds within `budget` tokens:
        each seed's window less what is already taken, skipped when it does not fit."""
        taken, used = set(), 0
        for row in ranked:
            new = [r for r in self.window(row) if r not in taken]
            if not new:
                continue
            cost = sum(tokens[r] for r in new) + HEADER_TOKENS
            if used + cost > budget:
                continue
            used += cost
            taken.update(new)
        return taken

    def windows(self, ranked, budget, tokens):
        """The words of the sentence-window context of `ranked` rows within `budget` tokens."""
        words = set()
        for row in self.packed(ranked, budget, tokens):
            words.update(normalise(self.texts[row]))
        return words


def bootstrap(differences, rounds=2000):
    """The 95 % interval of the mean of per-question differences (×100), 2,000 resamples."""
    rng = np.random.default_rng(7)
    d = np.asarray(differences)
    means = [d[rng.integers(0, len(d), len(d))].mean() for _ in range(rounds)]
    return 100 * np.percentile(means, 2.5), 100 * np.percentile(means, 97.5)
