#!/usr/bin/env python3
"""Our LoRA adapters of NomicBERT and GTE loaded by peft: tests/golden/lora_peft_load.py's checks for the rotary
families, whose adapters name transformers' modules (`self_attn.q_proj`, `mlp.gate_proj`...) while their checkpoints
store those weights packed (`qkv_proj` / `Wqkv`, `up_gate_proj`; NomicBERT's `fc11`, `fc12`).

    BERTGPU_LORA_EXPORT=/tmp/lora-rotary cargo test --locked --test finetune_families lora
    /work/venv/bin/python tests/golden/lora_rotary_peft_load.py /tmp/lora-rotary

The same checks run on DeBERTa's case (`query_proj`, `value_proj`, rows of our fused q/k/v as well).

tests/finetune_families.rs writes DIR/<case>/ for each rotary case (and DeBERTa's) of its LoRA test (after 2 steps on the CPU):
adapter_config.json and adapter_model.safetensors (lora_peft::export_adapter), merged/ (lora_peft::merged through
rows::export_folder) and logits.json. For each, in float64:

  1. PeftModel.from_pretrained(base, DIR) loads every tensor of our adapter file (each peft parameter it names holds
     our values) and gives our logits;
  2. merge_and_unload() of that model saved by transformers (which packs q/k/v and up/gate back as the checkpoint
     stores them) equals our merged folder, tensor by tensor;
  3. from_pretrained(DIR/merged) gives our logits.
"""
import json
import os
import sys
import tempfile

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_peft_load import ROOT, TOL, adapter_loaded  # noqa: E402


def check(d):
    ours = json.load(open(os.path.join(d, "logits.json")))
    auto = AutoModelForTokenClassification if ours["task"] == "token" else AutoModelForSequenceClassification
    batch = {k: torch.tensor(ours[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    want = torch.tensor(ours["logits"], dtype=torch.float64).reshape(-1)
    base = auto.from_pretrained(os.path.join(ROOT, "tests", "models", ours["base"]), attn_implementation="eager")
    model = PeftModel.from_pretrained(base.double(), d).double().eval()
    loaded = adapter_loaded(model, d)
    with torch.no_grad():
        got = model(**batch).logits.reshape(-1)
    err = (got - want).abs().max().item()
    assert err <= TOL, f"{d}: peft logits differ by {err}"
    merged = model.merge_and_unload()
    with tempfile.TemporaryDirectory() as tmp:
        merged.save_pretrained(tmp)
        theirs = load_file(os.path.join(tmp, "model.safetensors"))
    mine = load_file(os.path.join(d, "merged", "model.safetensors"))
    assert set(theirs) == set(mine), f"{d}: tensors {sorted(set(theirs) ^ set(mine))}"
    worst = max((theirs[n].double() - mine[n].double()).abs().max().item() for n in mine)
    assert worst <= TOL, f"{d}: merged weights differ by {worst}"
    folder = auto.from_pretrained(os.path.join(d, "merged"), attn_implementation="eager").double().eval()
    with torch.no_grad():
        ferr = (folder(**batch).logits.reshape(-1) - want).abs().max().item()
    assert ferr <= TOL, f"{d}: merged folder's logits differ by {ferr}"
    print(f"{os.path.basename(d)}: {loaded} adapter tensors loaded by peft; logits {err:.2e} from ours; "
          f"merge_and_unload vs our merged folder {worst:.2e} over {len(mine)} tensors; merged folder's logits {ferr:.2e}")


def main(d):
    for case in sorted(os.listdir(d)):
        check(os.path.join(d, case))
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
