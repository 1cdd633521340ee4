#!/usr/bin/env python3
"""Golden for LoRA fine-tuning of the rotary families, NomicBERT and GTE: tests/golden/lora.py's run (read its
docstring: peft's get_peft_model on the float64 model, A and B overwritten from a seeded generator and recorded in
`init`, the loss and every trainable gradient at the start, five AdamW steps), on the batches of
tests/golden/finetune_rotary.json's cases and with transformers 5's own classes.

Run from the repository root (torch 2.x, transformers 5.x, peft):

    /work/venv/bin/python tests/golden/lora_rotary.py

It writes tests/golden/lora_rotary.json:

  gte_qv     tiny-gte-classifier  SEQ_CLS, r 4, lora_alpha 8, target_modules ["q_proj", "v_proj"]
  nomic_all  tiny-nomic-ner       TOKEN_CLS, r 2, lora_alpha 3, every linear of the layers: ["q_proj", "k_proj",
                                  "v_proj", "o_proj", "up_proj", "gate_proj", "down_proj"]

The adapters sit on transformers' modules (`gte.layers.0.self_attn.q_proj`, `nomic_bert.layers.0.mlp.gate_proj`),
which the checkpoints store packed (`qkv_proj`, `Wqkv`; `fc11`, `fc12`): the names in the JSON are peft's without
`base_model.model.` and `.default`, as lora.py writes them. `merged` is transformers' module weights and not read
for these families (tests/golden/lora_rotary_peft_load.py checks our merged folders against peft's merge).
"""
import json
import os
import sys

import torch
from transformers import GteForSequenceClassification, NomicBertForTokenClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora as L  # noqa: E402

SRC = os.path.join(L.ROOT, "tests", "golden", "finetune_rotary.json")
OUT = os.path.join(L.ROOT, "tests", "golden", "lora_rotary.json")
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "gate_proj", "down_proj"]


def main():
    torch.set_num_threads(1)
    src = json.load(open(SRC))["cases"]
    cases = {
        "gte_qv": L.run("gte_qv", GteForSequenceClassification, "tiny-gte-classifier", src["gte_classify"], "SEQ_CLS",
                        4, 8, ["q_proj", "v_proj"], 11),
        "nomic_all": L.run("nomic_all", NomicBertForTokenClassification, "tiny-nomic-ner", src["nomic_ner"],
                           "TOKEN_CLS", 2, 3, ALL, 12),
    }
    L.write(OUT, cases)


if __name__ == "__main__":
    main()
