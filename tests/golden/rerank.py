#!/usr/bin/env python3
"""Goldens for `rerank`: a tiny seeded cross-encoder (BertForSequenceClassification with one output, as
sentence-transformers' CrossEncoder saves them) scored by PyTorch `transformers`.

Run from the repository root after heads.py (it reuses heads.py's tiny WordPiece vocabulary and texts):

    /path/to/venv/bin/python tests/golden/rerank.py

It writes tests/models/tiny-cross-encoder/ and tests/golden/rerank.json: for each query, its documents, the logit of
each (query, document) pair, and the documents ranked by logit (the reranking a cross-encoder gives).
"""
import json
import os
import sys

import torch
from transformers import AutoTokenizer, BertForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "rerank.json")
DOCUMENTS = list(dict.fromkeys([c["context"] for c in H.QA_INPUTS] + H.NER_TEXTS + [t for p in H.NSP_PAIRS for t in p]))
QUERIES = [q["question"] for q in H.QA_INPUTS] + ["the cat sat on the mat."]


def main():
    tok_dir = os.path.join(H.MODELS, "tiny-pretraining")
    assert os.path.exists(os.path.join(tok_dir, "vocab.txt")), "run heads.py first"
    V = len(open(os.path.join(tok_dir, "vocab.txt"), encoding="utf-8").read().splitlines())
    tok = AutoTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(21)
    m = H.perturb(BertForSequenceClassification(H.config(
        V, architectures=["BertForSequenceClassification"], num_labels=1)), 121).eval()
    with torch.no_grad():
        # Spread the scores (a random head scores every pair about alike), so that rankings have clear gaps.
        m.classifier.weight.mul_(10.0)
    H.save(m, "tiny-cross-encoder", tok_dir)
    rows = []
    for i, q in enumerate(QUERIES):
        # Each query gets a different slice of the documents, in an order unlike the ranking.
        docs = DOCUMENTS[i:] + DOCUMENTS[:i]
        enc = tok([q] * len(docs), docs, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            logits = m(**enc).logits[:, 0]
        order = sorted(range(len(docs)), key=lambda j: -float(logits[j]))
        ranked = [float(logits[j]) for j in order]
        rows.append({"query": q, "documents": docs, "logits": H.fl(logits), "ranking": order,
                     "min_gap": H.min_gap(ranked)})
    golden = {"note": "float32 PyTorch logits of (query, document) pairs; tests/rerank.rs names the tolerances",
              "cross_encoder": rows}
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes; min gap between neighbours in a ranking",
          min(r["min_gap"] for r in rows), file=sys.stderr)


if __name__ == "__main__":
    main()
