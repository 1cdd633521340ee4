#!/usr/bin/env python3
"""Goldens for the heads at label counts that heads.py's checkpoints leave out, from PyTorch `transformers`.

Run from the repository root after heads.py (it reuses heads.py's tokenizer, texts and helpers; needs torch,
transformers 5.x, tokenizers, safetensors):

    /path/to/venv/bin/python tests/golden/head_widths.py

The GPU's matmul kernels read four columns at a time (vec4) where a width allows it and one at a time where it does
not, and a head is the narrowest product a model runs: tiny-ner has 7 labels, tiny-classifier 3, tiny-multilabel 4,
QA and next-sentence 2, the cross-encoder and ELECTRA's discriminator 1. This adds a token classifier whose width is
a multiple of 4:

  tests/models/tiny-ner-8/            BertForTokenClassification, 8 BIO labels, seeded random, no pooler
  tests/golden/head_widths.json       its logits and the token-classification pipeline's outputs (as heads.json's
                                      "tiny_ner"), under "tiny_ner_8"
"""
import os
import sys

import torch
from transformers import AutoTokenizer, BertForTokenClassification, pipeline

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads  # noqa: E402  (heads.py beside this file: the same tokenizer, texts, config and helpers)

OUT = os.path.join(heads.ROOT, "tests", "golden", "head_widths.json")
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC"]


def ner_rows(m, tok):
    """heads.py's token-classification golden rows for `m`."""
    ner = pipeline("token-classification", model=m, tokenizer=tok, device="cpu")
    rows = []
    for text in heads.NER_TEXTS:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            logits = m(**enc).logits[0]
        top2 = torch.topk(torch.softmax(logits, -1), 2, dim=-1).values
        none = ner(text, aggregation_strategy="none")
        simple = ner(text, aggregation_strategy="simple")
        rows.append({
            "text": text, "input_ids": enc["input_ids"][0].tolist(), "logits": [heads.fl(r) for r in logits],
            "min_top2_gap": heads.f((top2[:, 0] - top2[:, 1]).min()),
            "none": [{"entity": e["entity"], "score": heads.f(e["score"]), "index": int(e["index"]), "word": e["word"],
                      "start": int(e["start"]), "end": int(e["end"])} for e in none],
            "simple": [{"entity_group": e["entity_group"], "score": heads.f(e["score"]), "word": e["word"],
                        "start": int(e["start"]), "end": int(e["end"])} for e in simple],
        })
    return rows


def main():
    tok_dir = os.path.join(heads.MODELS, "tiny-pretraining")
    tok = AutoTokenizer.from_pretrained(tok_dir)
    vocab_size = len(open(os.path.join(tok_dir, "vocab.txt"), encoding="utf-8").read().splitlines())
    id2label = dict(enumerate(LABELS))
    torch.manual_seed(8)
    cfg = heads.config(vocab_size, architectures=["BertForTokenClassification"], id2label=id2label,
                       label2id={v: k for k, v in id2label.items()})
    m = heads.perturb(BertForTokenClassification(cfg), 108).eval()
    with torch.no_grad():
        # As heads.py's tiny-ner: labels balanced over the texts, "O" favoured a little, so that entities, B-/I- runs
        # and skipped "O" tokens all occur.
        m.classifier.weight.mul_(3.0)
        enc = tok(heads.NER_TEXTS, padding=True, return_tensors="pt")
        logits = m(**enc).logits[enc["attention_mask"] == 1]
        m.classifier.bias.sub_(logits.mean(0))
        m.classifier.bias[0] += 0.5
    heads.save(m, "tiny-ner-8", tok_dir)
    golden = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/heads.rs",
              "tiny_ner_8": ner_rows(m, tok)}
    heads.write_golden(OUT, golden)
    print("ner-8 min top-2 gap", min(r["min_top2_gap"] for r in golden["tiny_ner_8"]), file=sys.stderr)
    print("ner-8 entities (none)", sum(len(r["none"]) for r in golden["tiny_ner_8"]), file=sys.stderr)


if __name__ == "__main__":
    main()
