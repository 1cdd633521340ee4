#!/usr/bin/env python3
"""Golden for LoRA fine-tuning of JinaBERT v2: tests/golden/lora.py's run (read its docstring: peft's get_peft_model
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
import math
import os
import sys
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_jina as FJ  # noqa: E402
import lora as L  # noqa: E402

SRC = os.path.join(L.ROOT, "tests", "golden", "finetune_jina.json")
OUT = os.path.join(L.ROOT, "tests", "golden", "lora_jina.json")
ALL = ["query", "key", "value", "attention.output.dense", "mlp.gated_layers", "mlp.wo"]


def run(case, src, r, alpha, targets, seed):
    model, _ = FJ.load()  # float64, train mode, every dropout 0
    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, bias="none", task_type="SEQ_CLS")
    model = get_peft_model(model, cfg)
    model.train()
    gen = torch.Generator().manual_seed(seed)
    init = {}
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lora_A." in n:
                bound = 1.0 / math.sqrt(p.shape[1])
                p.copy_((torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound)
            elif ".lora_B." in n:
                p.copy_((torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) * 0.2)
            else:
                continue
            init[L.ours(n)] = L.flat(p)
    named = [(L.ours(n), p) for n, p in model.named_parameters() if p.requires_grad]
    assert not any("pooler" in n for n, _ in named), "peft trains the pooler?"
    batch = {k: torch.tensor(src[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    labels = torch.tensor(src["labels"])
    no_decay = [n for n, _ in named if n.endswith("bias") or "LayerNorm.weight" in n]
    groups = [{"params": [p for n, p in named if n not in no_decay], "weight_decay": L.WD},
              {"params": [p for n, p in named if n in no_decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=L.LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    losses, norms = [], []
    for step in range(L.STEPS):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model.base_model(**batch), labels)
        loss.backward()
        if step == 0:
            grads = {n: L.flat(p.grad) for n, p in named}
        losses.append(float(f"{loss.item():.17g}"))
        norms.append(float(f"{torch.nn.utils.clip_grad_norm_([p for _, p in named], L.MAX_NORM).item():.17g}"))
        opt.step()
    params_after = {n: L.flat(p) for n, p in named}
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
            saved_keys = sorted(f.keys())
        with open(os.path.join(d, "adapter_config.json")) as f:
            saved_config = json.load(f)
    saved_config["base_model_name_or_path"] = f"tests/models/{FJ.NAME}"
    merged_model = model.merge_and_unload()
    targeted = {n.removesuffix(".lora_A.weight") for n in init if n.endswith(".lora_A.weight")}
    merged = {f"{m}.weight": L.flat(p) for m in sorted(targeted) for n, p in merged_model.named_parameters()
              if n == f"{m}.weight"}
    assert len(merged) == len(targeted), "a merged weight is missing"
    return {"model": FJ.NAME, "task_type": "SEQ_CLS", "r": r, "lora_alpha": alpha, "target_modules": targets,
            "input_ids": src["input_ids"], "token_type_ids": src["token_type_ids"],
            "attention_mask": src["attention_mask"], "labels": src["labels"], "lr": L.LR, "weight_decay": L.WD,
            "max_norm": L.MAX_NORM, "init": init, "trainable": [n for n, _ in named], "no_decay": no_decay,
            "loss": losses[0], "grads": grads, "losses": losses, "grad_norms": norms, "params_after": params_after,
            "merged": merged, "saved_keys": saved_keys, "saved_config": saved_config}


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
