#!/usr/bin/env python3
"""Our LoRA export loaded by peft and transformers: the adapter gives our logits, the merged folder too.

    BERTGPU_LORA_EXPORT=/tmp/lora-export cargo test --locked --test lora_golden query_value
    .venv/bin/python tests/golden/lora_peft_load.py /tmp/lora-export

tests/lora_golden.rs (qv_classify on the CPU, after its 5 AdamW steps) writes into the folder: adapter_config.json and
adapter_model.safetensors (lora_peft::export_adapter), merged/ (config.json and model.safetensors, lora_peft::merged through
rows::export_folder) and logits.json (our LoRA model's logits on the golden batch). This script checks, in float64:

  1. PeftModel.from_pretrained(tiny-classifier, DIR) loads every tensor of our adapter file into the model (each
     peft parameter it names holds exactly our values), and its logits equal ours (max abs difference below TOL);
  2. merge_and_unload() of that model equals our merged folder's weights, tensor by tensor;
  3. BertForSequenceClassification.from_pretrained(DIR/merged) gives our logits too.
"""
import json
import os
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import BertForSequenceClassification

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(ROOT, "tests", "models", "tiny-classifier")
# Our logits are f32 from f32 parameters; these runs are float64 from the same f32 values: f32 rounding only.
TOL = 1e-5


def adapter_loaded(model, d):
    """Every tensor of DIR/adapter_model.safetensors is in the peft model under peft's own name (the adapter's, or
    modules_to_save's, "default" copy) and holds exactly our values; their number."""
    state = model.state_dict()
    saved = load_file(os.path.join(d, "adapter_model.safetensors"))
    for k, v in saved.items():
        stem, leaf = k.rsplit(".", 1)
        name = f"{stem}.default.{leaf}" if ".lora_" in k else f"{stem}.modules_to_save.default.{leaf}"
        assert name in state, f"{d}: {k}: no {name} in the peft model"
        assert torch.equal(state[name], v.double()), f"{d}: {k} was not loaded"
    return len(saved)


def main(d):
    ours = json.load(open(os.path.join(d, "logits.json")))
    batch = {k: torch.tensor(ours[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    want = torch.tensor(ours["logits"], dtype=torch.float64).reshape(len(ours["input_ids"]), -1)

    base = BertForSequenceClassification.from_pretrained(BASE, attn_implementation="eager").double().eval()
    model = PeftModel.from_pretrained(base, d).double().eval()
    print(f"all {adapter_loaded(model, d)} tensors of adapter_model.safetensors loaded into the peft model")
    with torch.no_grad():
        got = model(**batch).logits
    err = (got - want).abs().max().item()
    print(f"PeftModel.from_pretrained(tiny-classifier, {d}): logits max abs difference from ours {err:.3e}")
    assert err <= TOL, err

    merged = model.merge_and_unload()
    ours_merged = load_file(os.path.join(d, "merged", "model.safetensors"))
    worst = 0.0
    for n, p in merged.state_dict().items():
        assert n in ours_merged, f"{n} missing from our merged folder"
        worst = max(worst, (p - ours_merged[n].double()).abs().max().item())
    print(f"merge_and_unload() vs our merged folder: max abs difference {worst:.3e} over {len(ours_merged)} tensors")
    assert worst <= TOL, worst

    folder = BertForSequenceClassification.from_pretrained(os.path.join(d, "merged"), attn_implementation="eager")
    with torch.no_grad():
        got = folder.double().eval()(**batch).logits
    err = (got - want).abs().max().item()
    print(f"from_pretrained(merged folder): logits max abs difference from ours {err:.3e}")
    assert err <= TOL, err
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
