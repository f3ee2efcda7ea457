#!/usr/bin/env python3
"""Writes a corpus FACTOR times the size of a JSONL corpus. Copy k of every document gets the id
`<doc_id>-x<k>` and the title `<title> (copy k)`; copy 0 is the original, and in copy k > 0
every number is shifted by k and capitalised words are exchanged among themselves: each
capitalised word whose lower case is one whole token of MiniLM's vocabulary (VOCAB, its
`tokenizer.json`) becomes another such word of the corpus, by a permutation drawn for copy k —
sentence openers ("The", "When", …) among themselves, the other words (names, mostly) among
themselves. So copies are distinct documents with distinct names and facts and distinct texts
to embed (the embed stage's reuse of identical texts does not make a larger corpus look cheaper
than it is), while a copy has the original's length in tokens and the same kinds of words where
the rules extractor looks for entities. Words made of several tokens are left as they are.
FACTOR may be fractional (the first documents of the first copy or of the last).

Usage: scripts/scale-corpus.py CORPUS.jsonl FACTOR OUT.jsonl [VOCAB]
       (VOCAB defaults to data/models/all-MiniLM-L6-v2/tokenizer.json, `make model`)
"""
import json
import random
import re
import sys

WORD = re.compile(r"\b[A-Z][a-z]+\b")
# Capitalised words that open sentences far more often than they name anything: exchanged only
# among themselves, so that a copy's sentences still open with a function word.
OPENERS = set(
    "The This That These Those There Then They Their When What Which Who Where While With From "
    "And But For His Her Its One Our She You Not Now After Before Some Many Most Each Yet How "
    "Why If In On At As By To It He We All No So An Of Or Be Do Is".split()
)


def permutations(docs: list[dict], vocab: set[str], k: int) -> dict[str, str]:
    """For copy k: a map from each whole-token capitalised word of the corpus to another."""
    words = sorted({w for d in docs for w in WORD.findall(d["text"]) if w.lower() in vocab})
    mapping = {}
    rng = random.Random(k)
    for pool in ([w for w in words if w in OPENERS], [w for w in words if w not in OPENERS]):
        shuffled = pool[:]
        rng.shuffle(shuffled)
        mapping.update(zip(pool, shuffled))
    return mapping


def varied(text: str, k: int, mapping: dict[str, str]) -> str:
    if not k:
        return text
    text = re.sub(r"\d+", lambda m: str(int(m.group()) + k), text)
    return WORD.sub(lambda m: mapping.get(m.group(), m.group()), text)


def main() -> None:
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    source, factor, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    vocab_path = sys.argv[4] if len(sys.argv) == 5 else "data/models/all-MiniLM-L6-v2/tokenizer.json"
    try:
        with open(vocab_path, encoding="utf-8") as f:
            vocab = {t for t in json.load(f)["model"]["vocab"] if t.isalpha()}
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"{vocab_path}: cannot read MiniLM's vocabulary ({e}); run `make model`")
    with open(source, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    want = round(len(docs) * factor)
    written = 0
    with open(out, "w", encoding="utf-8") as f:
        for k in range(int(factor) + 1):
            mapping = permutations(docs, vocab, k) if k else {}
            for i, doc in enumerate(docs):
                if written == want:
                    break
                doc_id = doc.get("doc_id") or f"doc-{i}"
                title = doc.get("title")
                copy = {
                    "doc_id": doc_id if k == 0 else f"{doc_id}-x{k}",
                    "title": title if k == 0 or not title else f"{varied(title, k, mapping)} (copy {k})",
                    "text": varied(doc["text"], k, mapping),
                }
                f.write(json.dumps(copy, ensure_ascii=False) + "\n")
                written += 1
    print(f"{out}: {written} documents", file=sys.stderr)


if __name__ == "__main__":
    main()
