#!/usr/bin/env python3
"""Golden for LoRA fine-tuning of DeBERTa-v2/v3: tests/golden/lora.py's run (read its docstring: peft's
get_peft_model on the float64 model, A and B overwritten from a seeded generator and recorded in `init`, the loss and
every trainable gradient at the start, five AdamW steps), on the batches of tests/golden/finetune_deberta.json's
cases and with transformers 5's own classes.

Run from the repository root (torch 2.x, transformers 5.x, peft):

    /work/venv/bin/python tests/golden/lora_deberta.py

It writes tests/golden/lora_deberta.json:

  deberta_qv   tiny-deberta-classifier  SEQ_CLS, r 4, lora_alpha 8, target_modules ["query_proj", "value_proj"]
  deberta_all  tiny-deberta-ner         TOKEN_CLS, r 2, lora_alpha 3, every linear of the layers: ["query_proj",
                                        "key_proj", "value_proj", "attention.output.dense", "intermediate.dense",
                                        "output.dense"]

DeBERTa's layers project the relative table with their own `query_proj` and `key_proj` (`share_att_key`), so the
adapters on those modules change the position terms too: peft wraps the module, and both calls go through it.
"""
import json
import os
import sys

import torch
from transformers import DebertaV2ForSequenceClassification, DebertaV2ForTokenClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora as L  # noqa: E402

SRC = os.path.join(L.ROOT, "tests", "golden", "finetune_deberta.json")
OUT = os.path.join(L.ROOT, "tests", "golden", "lora_deberta.json")
ALL = ["query_proj", "key_proj", "value_proj", "attention.output.dense", "intermediate.dense", "output.dense"]


def main():
    torch.set_num_threads(1)
    src = json.load(open(SRC))["cases"]
    cases = {
        "deberta_qv": L.run("deberta_qv", DebertaV2ForSequenceClassification, "tiny-deberta-classifier",
                            src["deberta_classify"], "SEQ_CLS", 4, 8, ["query_proj", "value_proj"], 13),
        "deberta_all": L.run("deberta_all", DebertaV2ForTokenClassification, "tiny-deberta-ner", src["deberta_ner"],
                             "TOKEN_CLS", 2, 3, ALL, 14),
    }
    L.write(OUT, cases)


if __name__ == "__main__":
    main()
