#!/usr/bin/env python3
"""Our fine-tuned models of BERT's relatives loaded by transformers: each is the family's own class, every tensor
of the file is one of the model's (none missing, none left over), and its logits are ours.

    BERTGPU_FAMILY_EXPORT=/tmp/family-export cargo test --locked --test finetune_families cpu
    /work/venv/bin/python tests/golden/finetune_families_load.py /tmp/family-export

(`cpu` runs the cases of tests/golden/finetune_families.json, tests/golden/finetune_rotary.json and
tests/golden/finetune_modernbert.json: NomicBERT's, GTE's and ModernBERT's folders load as NomicBertFor..., GteFor...
and ModernBertFor...)

tests/finetune_families.rs writes, for each case of tests/golden/finetune_families.json, after its five AdamW steps on
the CPU, DIR/<case>/config.json and model.safetensors (rows::export_folder: what `bertgpu fine-tune` and `fineTune`
write) and logits.json (our trained model's logits on the case's batch). This script loads each folder with
AutoModelForSequenceClassification / AutoModelForTokenClassification / AutoModelForQuestionAnswering, checks the class is the one config.json's
`architectures` names and that loading reported no missing, unexpected or mismatched tensor, and compares the
logits in float64 (a token classifier's on the real tokens; QA's start and end logits at every position, padding
included: RoBERTa's and MPNet's padding tokens read position row padding_idx in both; DeBERTa's padded queries are
masked whole and ModernBERT's with no real key in their local window see every key alike, in both).
"""
import json
import os
import sys

import torch
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)
import transformers.models.modernbert.modeling_modernbert as modernbert

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from finetune_modernbert import float64_softmax  # noqa: E402

# Our logits are f32 from f32 parameters; these runs are float64 from the same f32 values: f32 rounding only.
TOL = 1e-5


def own_class(auto, folder):
    """`auto.from_pretrained(folder)`, checked to be the class config.json's `architectures` names, with no tensor
    missing, unexpected or mismatched; the model and that class's name."""
    model, info = auto.from_pretrained(folder, attn_implementation="eager", output_loading_info=True)
    arch = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
    assert type(model).__name__ == arch, f"{folder}: loaded as {type(model).__name__}, config says {arch}"
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info[k], f"{folder}: {k} {info[k]}"
    return model, arch


def main(d):
    # ModernBERT's eager attention takes its softmax in float32, which in float64 turns a padded query with no real
    # key in its window into NaN (tests/golden/finetune_modernbert.py): its float64 twin here.
    modernbert.eager_attention_forward = float64_softmax
    worst = 0.0
    for case in sorted(os.listdir(d)):
        folder = os.path.join(d, case)
        ours = json.load(open(os.path.join(folder, "logits.json")))
        auto = {"token": AutoModelForTokenClassification, "qa": AutoModelForQuestionAnswering}.get(
            ours["task"], AutoModelForSequenceClassification)
        model, arch = own_class(auto, folder)
        model = model.double().eval()
        batch = {"input_ids": torch.tensor(ours["input_ids"]), "attention_mask": torch.tensor(ours["attention_mask"])}
        if model.config.model_type in ("bert", "electra", "albert", "gte", "nomic_bert"):
            batch["token_type_ids"] = torch.tensor(ours["token_type_ids"])
        with torch.no_grad():
            out = model(**batch)
            # QA: (B*T, 2) rows of (start, end), as ours.
            logits = torch.stack([out.start_logits, out.end_logits], -1) if ours["task"] == "qa" else out.logits
            got = logits.reshape(-1)
        want = torch.tensor(ours["logits"], dtype=torch.float64)
        assert got.shape == want.shape, f"{case}: {got.shape} vs {want.shape}"
        if ours["task"] == "token":
            # Only the real tokens' logits: transformers gives RoBERTa's padding tokens position `padding_idx`, we
            # the next rows; nothing reads a padding token's logits (their labels are -100).
            real = batch["attention_mask"].reshape(-1).repeat_interleave(model.config.num_labels).bool()
            got, want = got[real], want[real]
        diff = (got - want).abs().max().item()
        worst = max(worst, diff)
        print(f"{case}: {arch}, {len(model.state_dict())} tensors, max |logit difference| {diff:.2e}")
        assert diff <= TOL, f"{case}: logits differ by {diff}"
    print(f"every folder loads as its family's class and gives our logits (worst {worst:.2e} <= {TOL})")


if __name__ == "__main__":
    main(sys.argv[1])
