#!/usr/bin/env python3
"""Our LoRA export loaded by peft and transformers: the adapter gives our logits, the merged folder too.

    BERTGPU_LORA_EXPORT=/tmp/lora-export cargo test --locked --test lora_golden query_value
    /work/venv/bin/python tests/golden/lora_peft_load.py /tmp/lora-export

tests/lora_golden.rs (qv_classify on the CPU, after its 5 AdamW steps) writes DIR/qv_classify/, as
tests/finetune_families.rs and tests/lora_modernbert_albert.rs write theirs (tests/common/lora.rs
`export_for_peft`; tests/golden/lora_rotary_peft_load.py and lora_modernbert_albert_peft_load.py run these checks on
them): adapter_config.json and adapter_model.safetensors (lora_peft::export_adapter), merged/ (config.json and
model.safetensors, lora_peft::merged through rows::export_folder) and logits.json (our LoRA model's logits on the
golden batch, the task and the base model under tests/models). For each DIR/<case>, in float64:

  1. PeftModel.from_pretrained(base, DIR/<case>) loads every tensor of our adapter file into the model (each peft
     parameter it names holds exactly our values), and its logits equal ours (max abs difference below TOL);
  2. merge_and_unload() of that model saved by transformers (which packs a family's q/k/v and up/gate back as its
     checkpoint stores them) equals our merged folder, tensor by tensor;
  3. from_pretrained(DIR/<case>/merged) gives our logits too.
"""
import json
import os
import sys
import tempfile

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def check(d, real_tokens_only=False):
    """The three checks on one case's folder `d`. `real_tokens_only`: a token task's logits are compared at the real
    tokens only (ModernBERT's padded queries whose window holds no real key are not transformers' there, and nothing
    reads them)."""
    ours = json.load(open(os.path.join(d, "logits.json")))
    auto = AutoModelForTokenClassification if ours["task"] == "token" else AutoModelForSequenceClassification
    batch = {k: torch.tensor(ours[k]) for k in ("input_ids", "token_type_ids", "attention_mask") if k in ours}
    if real_tokens_only and ours["task"] == "token":
        real = torch.tensor(ours["attention_mask"]).reshape(-1).bool()
        pick = lambda x: x.reshape(real.numel(), -1)[real].reshape(-1)  # noqa: E731
    else:
        pick = lambda x: x.reshape(-1)  # noqa: E731
    want = pick(torch.tensor(ours["logits"], dtype=torch.float64))
    base = auto.from_pretrained(os.path.join(ROOT, "tests", "models", ours["base"]), attn_implementation="eager")
    model = PeftModel.from_pretrained(base.double(), d).double().eval()
    loaded = adapter_loaded(model, d)
    with torch.no_grad():
        got = pick(model(**batch).logits)
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
        ferr = (pick(folder(**batch).logits) - want).abs().max().item()
    assert ferr <= TOL, f"{d}: merged folder's logits differ by {ferr}"
    print(f"{os.path.basename(d)}: {loaded} adapter tensors loaded by peft; logits {err:.2e} from ours; "
          f"merge_and_unload vs our merged folder {worst:.2e} over {len(mine)} tensors; merged folder's logits {ferr:.2e}")


def main(d, real_tokens_only=False):
    """[`check`] on every case folder of `d`."""
    cases = sorted(os.listdir(d))
    assert cases, f"{d} is empty"
    for case in cases:
        check(os.path.join(d, case), real_tokens_only)
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
