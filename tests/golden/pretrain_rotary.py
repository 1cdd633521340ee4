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
    cases = {
        "gte": P.case("gte", GteForMaskedLM, "tiny-gte-mlm", False, runner=R.run),
        "nomic": P.case("nomic", NomicBertForMaskedLM, "tiny-nomic-mlm", True, runner=R.run),
    }
    F.write(OUT, cases)


if __name__ == "__main__":
    main()
