#!/usr/bin/env python3
"""A NomicBERT and a GTE whose config.json is in the hub repository's form (nomic-ai's `n_embd`...; Alibaba-NLP's
`model_type: "new"`), fine-tuned by `bertgpu fine-tune`, load in transformers as its own class (the config.json
written in transformers' keys; no tensor missing, unexpected or mismatched) and give bertgpu's probabilities.

    cargo build --locked --bin bertgpu
    BERTGPU_CLI=target/debug/bertgpu /work/venv/bin/python tests/golden/hub_config_load.py

The GTE is tests/models/tiny-gte-ntk without its NTK scaling (gte-multilingual-base's form; the NTK rotation has
no transformers form and is refused for training). Prints the worst probability difference.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from finetune_families_load import own_class  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("BERTGPU_CLI", os.path.join(ROOT, "target/debug/bertgpu"))
ENV = {**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
# bertgpu's probabilities are f32 from f32 parameters; transformers runs here in float64 from the same values.
TOL = 1e-5
TEXTS = ["the cat 99 sat on the mat", "my car 99 drove down the road fast"]


def main():
    worst = 0.0
    with tempfile.TemporaryDirectory() as d:
        gte = os.path.join(d, "tiny-gte-new")
        shutil.copytree(os.path.join(ROOT, "tests/models/tiny-gte-ntk"), gte)
        cfg = json.load(open(os.path.join(gte, "config.json")))
        del cfg["rope_scaling"]
        json.dump(cfg, open(os.path.join(gte, "config.json"), "w"))
        data = os.path.join(d, "train.jsonl")
        with open(data, "w") as f:
            for i in range(8):
                f.write(json.dumps({"text": f"the cat {i} sat on the mat", "label": "animal"}) + "\n")
                f.write(json.dumps({"text": f"my car {i} drove down the road", "label": "vehicle"}) + "\n")
        for model in (os.path.join(ROOT, "tests/models/tiny-nomic-hub"), gte):
            out = os.path.join(d, os.path.basename(model) + "-out")
            subprocess.run([CLI, "fine-tune", "--task", "classify", "--model", model, "--data", data, "--out", out,
                            "--epochs", "2", "--lr", "2e-3", "--batch-size", "8", "--validation-split", "0",
                            "--device", "cpu"], check=True, capture_output=True, env=ENV)
            got = subprocess.run([CLI, "classify", "--model", out, "--device", "cpu"], check=True, capture_output=True,
                                 env=ENV, input="".join(t + "\n" for t in TEXTS).encode()).stdout.decode().splitlines()
            ours = [{e["label"]: e["score"] for e in json.loads(l)} for l in got]
            m, arch = own_class(AutoModelForSequenceClassification, out)
            m = m.double().eval()
            tok = AutoTokenizer.from_pretrained(out)
            with torch.no_grad():
                p = m(**tok(TEXTS, padding=True, return_tensors="pt")).logits.softmax(-1)
            for row, want in zip(p.tolist(), ours):
                for i, v in enumerate(row):
                    diff = abs(v - want[m.config.id2label[i]])
                    worst = max(worst, diff)
                    assert diff <= TOL, f"{out}: {m.config.id2label[i]} transformers {v}, bertgpu {want}"
            print(f"{os.path.basename(model)}: loads as {arch}, probabilities as bertgpu's")
    print(f"worst |p_transformers - p_bertgpu| {worst:.2e} (bound {TOL})")


if __name__ == "__main__":
    main()
