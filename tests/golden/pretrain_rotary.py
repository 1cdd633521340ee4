#!/usr/bin/env python3
"""Golden for continued pre-training (masked LM) of the rotary families, NomicBERT and GTE, each with its own
masked-LM head: tests/golden/pretrain_families.py's case (the same texts, the same fixed masking, the same float64
run and five AdamW steps; read its docstring), recorded under the checkpoint's tensor names as
tests/golden/finetune_rotary.py records them (transformers' own save of the gradients; its docstring says why).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/pretrain_rotary.py

It writes tests/golden/pretrain_rotary.json:

  gte    tiny-gte-mlm    GteForMaskedLM (lm_head.dense, the exact GELU whatever hidden_act says, lm_head.norm, the
                         decoder tied to the word embeddings, lm_head.decoder.bias)
  nomic  tiny-nomic-mlm  NomicBertForMaskedLM (cls.predictions.transform.dense, hidden_act (SiLU),
                         transform.layer_norm, the tied decoder, cls.predictions.bias)
"""
import json
import os
import sys

import torch
from transformers import GteForMaskedLM, NomicBertForMaskedLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as F  # noqa: E402
import finetune_rotary as R  # noqa: E402
import pretrain_families as P  # noqa: E402

OUT = os.path.join(F.ROOT, "tests", "golden", "pretrain_rotary.json")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    F.run_plain = F.run
    F.run = R.run
    try:
        cases = {
            "gte": P.case("gte", GteForMaskedLM, "tiny-gte-mlm", False),
            "nomic": P.case("nomic", NomicBertForMaskedLM, "tiny-nomic-mlm", True),
        }
    finally:
        F.run = F.run_plain
    golden = {"torch": torch.__version__.split("+")[0], "dtype": "float64", "cases": cases}
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes")
    for name, c in cases.items():
        t = len(c["input_ids"][0])
        sel = sum(l != -100 for r in c["labels"] for l in r)
        print(f"{name}: B {len(c['input_ids'])} T {t}, {sel} selected, loss {c['loss']:.17g} grad_norm "
              f"{c['grad_norms'][0]:.17g} loss after {F.STEPS} steps {c['losses'][-1]:.17g} ({len(c['grads'])} "
              f"parameters; zero: {c['zero_grads']})")


if __name__ == "__main__":
    main()
