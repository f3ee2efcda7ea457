#!/usr/bin/env python3
"""Writes a corpus FACTOR times the size of a JSONL corpus: copy k of every document gets the id
`<doc_id>-x<k>` and the title `<title> (copy k)`, and its text is the original with every number
shifted by k (so that copies are distinct documents with distinct facts, not byte-identical
duplicates). FACTOR may be fractional (the first documents of the last copy).

Usage: scripts/scale-corpus.py CORPUS.jsonl FACTOR OUT.jsonl
"""
import json
import re
import sys


def shifted(text: str, k: int) -> str:
    return re.sub(r"\d+", lambda m: str(int(m.group()) + k), text) if k else text


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    source, factor, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    with open(source, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    want = round(len(docs) * factor)
    written = 0
    with open(out, "w", encoding="utf-8") as f:
        for k in range(int(factor) + 1):
            for i, doc in enumerate(docs):
                if written == want:
                    break
                doc_id = doc.get("doc_id") or f"doc-{i}"
                copy = {
                    "doc_id": doc_id if k == 0 else f"{doc_id}-x{k}",
                    "title": doc.get("title") if k == 0 or not doc.get("title") else f"{doc['title']} (copy {k})",
                    "text": shifted(doc["text"], k),
                }
                f.write(json.dumps(copy, ensure_ascii=False) + "\n")
                written += 1
    print(f"{out}: {written} documents", file=sys.stderr)


if __name__ == "__main__":
    main()
