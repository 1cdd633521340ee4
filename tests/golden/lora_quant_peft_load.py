#!/usr/bin/env python3
"""A LoRA adapter trained by bertgpu over a Q8_0 .gguf, loaded by peft onto the dequantized base in transformers,
gives our outputs. By hand (not in CI):

    D=/tmp/lqpeft; mkdir -p $D   # train.jsonl: tests/common/mod.rs cats_and_cars' 24 lines
    bertgpu convert --model tests/models/tiny-classifier --dtype q8_0 --out $D/tiny-q8.gguf
    bertgpu fine-tune --task classify --model $D/tiny-q8.gguf --data $D/train.jsonl --out $D/adapter --epochs 4 \\
        --lr 1e-2 --batch-size 8 --validation-split 0.25 --device cpu --lora 4 --lora-targets all
    (the same with --merge --out $D/merged)
    printf 'the cat 99 sat on the mat and slept\\nmy car 99 drove down the road fast\\na dog ran\\n' \\
        | bertgpu classify --model $D/merged --device cpu > $D/ours.jsonl
    .venv/bin/python tests/golden/lora_quant_peft_load.py $D

The base is tiny-classifier stored as `bertgpu convert --dtype q8_0` stores it (src/weights/gguf/storage.rs): the
word embeddings and every encoder linear weight Q8_0 (llama.cpp's quantize_row_q8_0_ref, here in numpy), the
position and token-type tables and the pooler f16, 1-D tensors f32; then dequantized. PeftModel.from_pretrained on it
with our adapter must give the class probabilities our CLI gives on the merged folder (f32 vs float64: TOL), and
transformers on our merged folder the same.
"""
import json
import os
import sys

import numpy as np
import torch
from peft import PeftModel
from transformers import AutoTokenizer, BertForSequenceClassification

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(ROOT, "tests", "models", "tiny-classifier")
TEXTS = ["the cat 99 sat on the mat and slept", "my car 99 drove down the road fast", "a dog ran"]
# Probabilities from f32 (ours) against float64 from the same stored values: f32 rounding only.
TOL = 1e-5


def q8_0(w):
    """llama.cpp's quantize_row_q8_0_ref then dequantized: per block of 32, d = amax / 127 (stored f16),
    q = roundf(x / d) with the f32 d's inverse."""
    x = w.astype(np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    v = x * inv
    q = np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))  # roundf: half away from zero
    return (q * d.astype(np.float16).astype(np.float32)).reshape(w.shape)


def main(d):
    tok = AutoTokenizer.from_pretrained(BASE)
    base = BertForSequenceClassification.from_pretrained(BASE, num_labels=2, ignore_mismatched_sizes=True,
                                                         attn_implementation="eager")
    sd = base.state_dict()
    for n, t in sd.items():
        a = t.numpy()
        if t.dim() == 2 and ("encoder.layer." in n or n.endswith("word_embeddings.weight")):
            sd[n] = torch.from_numpy(q8_0(a))
        elif t.dim() == 2 and not n.startswith("classifier."):
            sd[n] = t.half().float()
    base.load_state_dict(sd)
    model = PeftModel.from_pretrained(base.double(), os.path.join(d, "adapter")).double().eval()
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        peft_p = torch.softmax(model(**batch).logits, -1)
    merged = BertForSequenceClassification.from_pretrained(os.path.join(d, "merged"), attn_implementation="eager").double().eval()
    with torch.no_grad():
        merged_p = torch.softmax(merged(**batch).logits, -1)
    labels = merged.config.id2label
    ours = [json.loads(line) for line in open(os.path.join(d, "ours.jsonl"))]
    assert len(ours) == len(TEXTS)
    ours_p = torch.tensor([[next(s["score"] for s in row if s["label"] == labels[i]) for i in range(2)] for row in ours],
                          dtype=torch.float64)
    e1 = (peft_p - ours_p).abs().max().item()
    e2 = (merged_p - ours_p).abs().max().item()
    print(f"peft adapter on the dequantized Q8_0 base vs our probabilities: max abs difference {e1:.3e}")
    print(f"transformers on our merged folder vs our probabilities: max abs difference {e2:.3e}")
    print("ours:", ours_p.tolist())
    assert e1 <= TOL and e2 <= TOL, (e1, e2)


if __name__ == "__main__":
    main(sys.argv[1])
