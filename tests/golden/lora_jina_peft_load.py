#!/usr/bin/env python3
"""Our LoRA adapters of JinaBERT loaded by peft: tests/golden/lora_peft_load.py's checks for the jina_* cases of
tests/lora_modernbert_albert.rs, on tests/golden/jina.py's float64 transcription of the authors' code (transformers
has no JinaBERT class, so no AutoModel loads the base or the merged folder: the transcription does, by the
checkpoint's names). The adapter on `mlp.gated_layers` is in the module's `[gated; non_gated]` order.

    BERTGPU_LORA_EXPORT=/tmp/lora-jina cargo test --locked --test lora_modernbert_albert on_the_cpu
    /work/venv/bin/python tests/golden/lora_jina_peft_load.py /tmp/lora-jina

For each DIR/jina_* (after the golden's 5 AdamW steps on the CPU), in float64:

  1. PeftModel.from_pretrained(transcription, DIR/<case>) loads every tensor of our adapter file and gives our logits;
  2. merge_and_unload() of that model equals our merged folder (merged/model.safetensors), tensor by tensor;
  3. the transcription loaded from our merged folder gives our logits.
"""
import json
import os
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_jina as FJ  # noqa: E402
import jina as J  # noqa: E402
import lora_peft_load as P  # noqa: E402


def check(d):
    ours = json.load(open(os.path.join(d, "logits.json")))
    assert ours["base"] == FJ.NAME and ours["task"] == "sequence", ours["base"]
    batch = {k: torch.tensor(ours[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    want = torch.tensor(ours["logits"], dtype=torch.float64).reshape(-1)
    base, _ = FJ.load()
    model = PeftModel.from_pretrained(base.eval(), d).double().eval()
    loaded = P.adapter_loaded(model, d)
    with torch.no_grad():
        got = model.base_model(**batch).reshape(-1)
    err = (got - want).abs().max().item()
    assert err <= P.TOL, f"{d}: peft logits differ by {err}"
    merged = model.merge_and_unload()
    theirs = merged.state_dict()
    mine = load_file(os.path.join(d, "merged", "model.safetensors"))
    assert set(theirs) == set(mine), f"{d}: tensors {sorted(set(theirs) ^ set(mine))}"
    worst = max((theirs[n].double() - mine[n].double()).abs().max().item() for n in mine)
    assert worst <= P.TOL, f"{d}: merged weights differ by {worst}"
    folder = J.JinaBertForSequenceClassification(json.load(open(os.path.join(d, "merged", "config.json"))))
    folder.load_state_dict({k: v.to(J.DT) for k, v in mine.items()})
    with torch.no_grad():
        ferr = (folder.to(J.DT).eval()(**batch).reshape(-1) - want).abs().max().item()
    assert ferr <= P.TOL, f"{d}: merged folder's logits differ by {ferr}"
    print(f"{os.path.basename(d)}: {loaded} adapter tensors loaded by peft; logits {err:.2e} from ours; "
          f"merge_and_unload vs our merged folder {worst:.2e} over {len(mine)} tensors; "
          f"merged folder's logits {ferr:.2e}")


def main(d):
    cases = sorted(c for c in os.listdir(d) if c.startswith("jina"))
    assert cases, f"{d} has no jina_* case"
    for case in cases:
        check(os.path.join(d, case))
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
