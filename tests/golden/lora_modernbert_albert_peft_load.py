#!/usr/bin/env python3
"""Our LoRA adapters of ModernBERT, ALBERT and ELECTRA loaded by peft: tests/golden/lora_rotary_peft_load.py's checks
for the cases of tests/lora_modernbert_albert.rs, whose adapters sit on ModernBERT's packed modules whole
(`attn.Wqkv`, `mlp.Wi` in its `[input; gate]` order, ...), on ALBERT's one shared layer, and (albert_proj,
electra_proj) on the embeddings' projection too (`embedding_hidden_mapping_in`, `embeddings_project`).

    BERTGPU_LORA_EXPORT=/tmp/lora-more cargo test --locked --test lora_modernbert_albert on_the_cpu
    /work/venv/bin/python tests/golden/lora_modernbert_albert_peft_load.py /tmp/lora-more

For each DIR/<case> (after the golden's 5 AdamW steps on the CPU: adapter_config.json, adapter_model.safetensors,
merged/ and logits.json), in float64:

  1. PeftModel.from_pretrained(base, DIR) loads every tensor of our adapter file (each peft parameter it names holds
     our values) and gives our logits (a token task's at the real tokens: ModernBERT's padded queries whose window
     holds no real key are not transformers' there, and nothing reads them);
  2. merge_and_unload() of that model saved by transformers equals our merged folder, tensor by tensor;
  3. from_pretrained(DIR/merged) gives our logits.

ModernBERT runs with tests/golden/finetune_modernbert.py's `float64_softmax` (transformers' eager attention takes its
softmax in float32, where a fully masked row becomes NaN).
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
import finetune_modernbert as FM  # noqa: E402
import transformers.models.modernbert.modeling_modernbert as M  # noqa: E402


def check(d):
    ours = json.load(open(os.path.join(d, "logits.json")))
    auto = AutoModelForTokenClassification if ours["task"] == "token" else AutoModelForSequenceClassification
    batch = {k: torch.tensor(ours[k]) for k in ("input_ids", "token_type_ids", "attention_mask") if k in ours}
    want = torch.tensor(ours["logits"], dtype=torch.float64)
    if ours["task"] == "token":
        real = torch.tensor(ours["attention_mask"]).reshape(-1).bool()
        pick = lambda x: x.reshape(real.numel(), -1)[real].reshape(-1)  # noqa: E731
    else:
        pick = lambda x: x.reshape(-1)  # noqa: E731
    want = pick(want)
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


def main(d):
    M.eager_attention_forward = FM.float64_softmax
    cases = sorted(os.listdir(d))
    assert cases, f"{d} is empty"
    for case in cases:
        check(os.path.join(d, case))
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
