#!/usr/bin/env python3
"""Golden for LoRA fine-tuning of JinaBERT v2: tests/golden/lora.py's train (read its docstring: peft's get_peft_model
on the float64 model, A and B overwritten from a seeded generator and recorded in `init`, the loss and every trainable
gradient at the start, five AdamW steps, the merge and what save_pretrained writes) on
tests/models/tiny-jina-classifier through tests/golden/jina.py's float64 transcription of the authors' code
(transformers has no JinaBERT class; peft's get_peft_model adapts any torch module by its modules' names), on the
batches and labels of tests/golden/finetune_jina.json's cases.

Run from the repository root after finetune_jina.py (torch 2.x, transformers 5.x for the tokenizer, peft; made with
peft 0.21.2), with a fixed hash seed (peft keeps `target_modules` as a set: its order in adapter_config.json follows
the string hashes):

    PYTHONHASHSEED=0 /work/venv/bin/python tests/golden/lora_jina.py

It writes tests/golden/lora_jina.json:

  jina_qv   jina_classify's batch  SEQ_CLS, r 4, lora_alpha 8, ["query", "value"] (peft's default for BERT)
  jina_all  jina_pair's batch      SEQ_CLS, r 2, lora_alpha 3, every linear of the layers: ["query", "key", "value",
                                   "attention.output.dense", "mlp.gated_layers", "mlp.wo"]

The adapter on `mlp.gated_layers` (no bias) is on the module whole, its B `(2I, r)` in the module's
`[gated; non_gated]` order. The loss is `JinaBertForSequenceClassification`'s cross-entropy on the logits of the
peft-wrapped module (`base_model(...)`: the transcription takes no `labels`).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_jina as FJ  # noqa: E402
import lora as L  # noqa: E402

SRC = os.path.join(L.ROOT, "tests", "golden", "finetune_jina.json")
OUT = os.path.join(L.ROOT, "tests", "golden", "lora_jina.json")
ALL = ["query", "key", "value", "attention.output.dense", "mlp.gated_layers", "mlp.wo"]


def run(case, src, r, alpha, targets, seed):
    model, _ = FJ.load()  # float64, train mode, every dropout 0
    batch = {k: torch.tensor(src[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = torch.tensor(src["labels"])
    # The transcription takes no labels: the cross-entropy of the peft-wrapped module's logits.
    return L.train(model, FJ.NAME, src, "SEQ_CLS", r, alpha, targets, seed,
                   lambda m: torch.nn.functional.cross_entropy(m.base_model(**batch), labels))


def main():
    torch.set_num_threads(1)
    src = json.load(open(SRC))["cases"]
    cases = {"jina_qv": run("jina_qv", src["jina_classify"], 4, 8, ["query", "value"], 21),
             "jina_all": run("jina_all", src["jina_pair"], 2, 3, ALL, 22)}
    gated = [n for n in cases["jina_all"]["init"] if "mlp.gated_layers.lora_B" in n]
    assert len(gated) == 2, gated
    L.write(OUT, cases, peft_version=True)


if __name__ == "__main__":
    main()
