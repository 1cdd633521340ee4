#!/usr/bin/env python3
"""Golden for LoRA fine-tuning: gradients of the adapters and the head, and AdamW steps, from Hugging Face `peft`.

Run from the repository root (needs torch 2.x, transformers 5.x and peft 0.13.2: `.venv/bin/pip install peft==0.13.2`):

    .venv/bin/python tests/golden/lora.py

It writes tests/golden/lora.json with two cases on the batches of tests/golden/finetune.json (same inputs and labels,
see finetune.py), each model from a committed tiny checkpoint in float64, train mode, dropout 0, eager attention:

  qv_classify  tests/models/tiny-classifier, task_type SEQ_CLS, r 4, lora_alpha 8, target_modules ["query", "value"]
               (peft's default for BERT)
  all_ner      tests/models/tiny-ner, task_type TOKEN_CLS, r 2, lora_alpha 3 (scale 1.5), every linear of the layers:
               ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]

`get_peft_model(model, LoraConfig(..., lora_dropout=0.0, bias="none"))` freezes the base model and trains the
adapters and `modules_to_save` (the classifier, for both task types). Its A and B start from peft's initialiser
(B = 0), which would make A's gradient zero at the first step; so both are overwritten from a seeded
torch.Generator, A ~ U(−1/√in, 1/√in) (peft's own bound) and B ~ U(−0.2, 0.2), and written to `init` so that the
Rust test starts from the same values. Names in the JSON are ours (transformers' module name + `.lora_A.weight` /
`.lora_B.weight`, `classifier.weight`): peft's `base_model.model.` prefix and its `.default` /
`.modules_to_save.default` parts removed.

Per case: `trainable` (the parameters with requires_grad, in our names), `loss` and `grads` at the start, then 5
AdamW steps on the same batch as finetune.py's (Trainer's groups: no weight decay on biases; LR 1e-3, WD 0.01,
clip_grad_norm_ 1.0, foreach=False): `losses`, `grad_norms`, `params_after` (the trainable parameters); `merged`:
the weights of the targeted linears after `merge_and_unload()` (W + scale·B·A); `saved_keys` and `saved_config`:
what `save_pretrained` writes (adapter_model.safetensors's tensor names, adapter_config.json).
"""
import json
import math
import os
import tempfile

import torch
from peft import LoraConfig, get_peft_model
from safetensors import safe_open
from transformers import BertForSequenceClassification, BertForTokenClassification

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models")
FINETUNE = os.path.join(ROOT, "tests", "golden", "finetune.json")
OUT = os.path.join(ROOT, "tests", "golden", "lora.json")

LR = 1e-3
WD = 0.01
MAX_NORM = 1.0
STEPS = 5
ALL = ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]


def flat(t):
    return [float(f"{v:.17g}") for v in t.detach().reshape(-1).tolist()]


def ours(name):
    name = name.removeprefix("base_model.model.")
    return name.replace(".modules_to_save.default", "").replace(".default", "")


def run(case, cls, model_name, src, task_type, r, alpha, targets, seed, types=True):
    """`types`: whether the model reads token_type_ids (ModernBERT has none)."""
    model = cls.from_pretrained(os.path.join(MODELS, model_name), attn_implementation="eager")
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout)), f"{case}: dropout"
    assert getattr(model.config, "attention_probs_dropout_prob", 0.0) == 0.0
    assert getattr(model.config, "attention_dropout", 0.0) == 0.0
    model.double()
    keys = ("input_ids", "token_type_ids", "attention_mask", "labels") if types else ("input_ids", "attention_mask", "labels")
    batch = {k: torch.tensor(src[k]) for k in keys}
    return train(model, model_name, src, task_type, r, alpha, targets, seed, lambda m: m(**batch).loss)


def train(model, model_name, src, task_type, r, alpha, targets, seed, loss_of):
    """peft's adapters on the float64 `model`, A and B drawn from `seed`, the loss `loss_of(peft_model)` of the
    batch `src` and every trainable gradient at the start, five AdamW steps, the merge and what save_pretrained
    writes (see `run`; tests/golden/lora_jina.py calls it on a module transformers has no class for)."""
    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, bias="none", task_type=task_type)
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
            init[ours(n)] = flat(p)
    named = [(ours(n), p) for n, p in model.named_parameters() if p.requires_grad]
    assert not any("pooler" in n for n, _ in named), "peft trains the pooler?"
    no_decay = [n for n, _ in named if n.endswith("bias") or "LayerNorm.weight" in n]
    groups = [
        {"params": [p for n, p in named if n not in no_decay], "weight_decay": WD},
        {"params": [p for n, p in named if n in no_decay], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model)
        loss.backward()
        if step == 0:
            grads = {n: flat(p.grad) for n, p in named}
        losses.append(float(f"{loss.item():.17g}"))
        norms.append(float(f"{torch.nn.utils.clip_grad_norm_([p for _, p in named], MAX_NORM).item():.17g}"))
        opt.step()
    params_after = {n: flat(p) for n, p in named}
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
            saved_keys = sorted(f.keys())
        with open(os.path.join(d, "adapter_config.json")) as f:
            saved_config = json.load(f)
    saved_config["base_model_name_or_path"] = f"tests/models/{model_name}"  # not this machine's absolute path
    merged_model = model.merge_and_unload()
    targeted = {n.removesuffix(".lora_A.weight") for n in init if n.endswith(".lora_A.weight")}
    merged = {f"{m}.weight": flat(p) for m in sorted(targeted) for n, p in merged_model.named_parameters()
              if n == f"{m}.weight"}
    assert len(merged) == len(targeted), "a merged weight is missing"
    return {
        "model": model_name,
        "task_type": task_type,
        "r": r,
        "lora_alpha": alpha,
        "target_modules": targets,
        "input_ids": src["input_ids"],
        "token_type_ids": src["token_type_ids"],
        "attention_mask": src["attention_mask"],
        "labels": src["labels"],
        "lr": LR,
        "weight_decay": WD,
        "max_norm": MAX_NORM,
        "init": init,
        "trainable": [n for n, _ in named],
        "no_decay": no_decay,
        "loss": losses[0],
        "grads": grads,
        "losses": losses,
        "grad_norms": norms,
        "params_after": params_after,
        "merged": merged,
        "saved_keys": saved_keys,
        "saved_config": saved_config,
    }


def write(out, cases, peft_version=False):
    """Writes the golden `out`: torch's version (and peft's, with `peft_version`), "float64" and the cases of
    [`run`], keys sorted; prints each case's loss before and after the steps."""
    golden = {"torch": torch.__version__.split("+")[0], "dtype": "float64", "cases": cases}
    if peft_version:
        import peft
        golden["peft"] = peft.__version__
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    print(f"wrote {out}: {os.path.getsize(out)} bytes")
    for name, c in cases.items():
        print(f"{name}: loss {c['loss']:.17g} → {c['losses'][-1]:.17g} after {STEPS} steps; "
              f"{len(c['trainable'])} trainable")


def main():
    torch.set_num_threads(1)
    with open(FINETUNE) as f:
        ft = json.load(f)["cases"]
    cases = {
        "qv_classify": run("qv_classify", BertForSequenceClassification, "tiny-classifier", ft["classify"], "SEQ_CLS",
                           4, 8, ["query", "value"], 1),
        "all_ner": run("all_ner", BertForTokenClassification, "tiny-ner", ft["ner"], "TOKEN_CLS", 2, 3, ALL, 2),
    }
    write(OUT, cases, peft_version=True)
    for name, c in cases.items():
        print(f"{name}: saved {c['saved_keys'][:3]}...; modules_to_save {c['saved_config']['modules_to_save']}")


if __name__ == "__main__":
    main()
