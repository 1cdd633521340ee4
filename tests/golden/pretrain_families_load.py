#!/usr/bin/env python3
"""The folders `bertgpu pretrain` writes for BERT's relatives load in transformers as the family's own
`...ForMaskedLM` (ALBERT's `AlbertForPreTraining`, sentence-order head included, as `AlbertForPreTraining`), with no
missing or unexpected tensor, and predict what bertgpu's `fill-mask` predicts on them.

Run from the repository root after `cargo build --release` (torch 2.x, transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/pretrain_families_load.py

(`BERTGPU_CLI=target/debug/bertgpu` runs a debug build's CLI instead.)

For each of tiny-roberta-mlm, tiny-xlmr-mlm, tiny-distilbert-mlm, tiny-albert-mlm, tiny-albert-pretraining,
tiny-electra-generator, tiny-gte-mlm, tiny-nomic-mlm and tiny-modernbert-mlm it
pre-trains 3 steps on a small corpus with the CLI (so the weights are no longer the checkpoint's), loads the folder
with `AutoModelForMaskedLM`, and compares the top-5 probabilities at a masked position with `bertgpu fill-mask`'s scores
on the same folder (both float32; they differ by rounding: |Δ| ≤ ATOL). Exits 1 on any difference.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("BERTGPU_CLI", os.path.join(ROOT, "target", "release", "bertgpu"))
# float32 softmax of the same logits, two summation orders: measured ≤ 1.3e-7 on these models (GTE).
ATOL = 1e-6
CORPUS = ("the cat sat on the mat.\nit was a sunny day.\n\nmy car is red.\nit drives fast.\n\n"
          "the dog ran home.\nhe was hungry.\n\nshe read a book.\nthe book was long.\n")
CASES = [("tiny-roberta-mlm", "RobertaForMaskedLM"), ("tiny-xlmr-mlm", "XLMRobertaForMaskedLM"),
         ("tiny-distilbert-mlm", "DistilBertForMaskedLM"), ("tiny-albert-mlm", "AlbertForMaskedLM"),
         ("tiny-albert-pretraining", "AlbertForPreTraining"), ("tiny-electra-generator", "ElectraForMaskedLM"),
         ("tiny-gte-mlm", "GteForMaskedLM"),
         ("tiny-nomic-mlm", "NomicBertForMaskedLM"), ("tiny-modernbert-mlm", "ModernBertForMaskedLM")]


def main(cases=CASES):
    """Each (checkpoint under tests/models, transformers class) of `cases`; exits 1 on any difference."""
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as fh:
            fh.write(CORPUS)
        for name, cls in cases:
            out = os.path.join(tmp, name)
            subprocess.run([CLI, "pretrain", "--model", os.path.join(ROOT, "tests", "models", name), "--data", corpus,
                            "--out", out, "--steps", "3", "--batch-size", "4", "--max-length", "16", "--lr", "1e-2",
                            "--mlm-probability", "0.3", "--device", "cpu"], check=True, capture_output=True)
            auto = AutoModelForPreTraining if cls.endswith("ForPreTraining") else AutoModelForMaskedLM
            model, info = auto.from_pretrained(out, output_loading_info=True)
            tok = AutoTokenizer.from_pretrained(out)
            text = f"the {tok.mask_token} sat on the mat."
            enc = tok(text, return_tensors="pt")
            with torch.no_grad():
                got = model(**enc)
                logits = (got.prediction_logits if cls.endswith("ForPreTraining") else got.logits)[0]
            pos = int((enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0])
            top = logits[pos].softmax(-1).topk(5)
            ours = subprocess.run([CLI, "fill-mask", "--model", out, "--device", "cpu", "--top-k", "5"], input=text + "\n",
                                  capture_output=True, text=True, check=True).stdout
            ours = json.loads(ours.splitlines()[0])
            worst = max(abs(o["score"] - float(s)) for o, s in zip(ours, top.values))
            same = [o["token"] for o in ours] == [int(i) for i in top.indices]
            ok = (model.__class__.__name__ == cls and not info["missing_keys"] and not info["unexpected_keys"]
                  and same and worst <= ATOL)
            bad += not ok
            print(f"{name}: {model.__class__.__name__}, missing {sorted(info['missing_keys'])}, unexpected "
                  f"{sorted(info['unexpected_keys'])}, top-5 tokens {'the same' if same else 'DIFFER'}, worst |Δp| "
                  f"{worst:.1e}{'' if ok else '  FAIL'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
