#!/usr/bin/env python3
"""The 8-bit sides of the browser benchmark against sentence-transformers, outside the browser: which one moves away
from f32. Eight texts of at most 128 tokens cut from the fortunes corpus (as bench/harness.mjs's makeTexts cuts the
(b) workload), embedded by sentence-transformers (the reference), by bertgpu's CLI (`embed`, CPU) on the folder and on
the Q8_0 GGUF, and by onnxruntime on the ONNX exports transformers.js loads (fp32 and q8, mean pooling + normalize as
its pipeline does). Needs bench/browser.sh --prepare-only --model NAME first; from the root:

    XDG_RUNTIME_DIR=/tmp python bench/q8_agreement.py [all-mpnet-base-v2] [target/release/bertgpu]

Prints each side's cosine to sentence-transformers (min and mean over the eight).
"""
import json
import subprocess
import sys

import numpy as np
import onnxruntime as ort
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

NAME = sys.argv[1] if len(sys.argv) > 1 else "all-mpnet-base-v2"
BINARY = sys.argv[2] if len(sys.argv) > 2 else "target/release/bertgpu"
M = f"bench/models/{NAME}"
tok = AutoTokenizer.from_pretrained(M)
words = " ".join(json.loads(line)["text"] for line in open("tests/data/fortunes/train.jsonl")).split()
texts, at = [], 0
for _ in range(8):
    n = 1
    while len(tok(" ".join(words[at:at + n + 1]))["input_ids"]) <= 128:
        n += 1
    texts.append(" ".join(words[at:at + n]))
    at += n


def ours(model):
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    r = subprocess.run([BINARY, "embed", "-m", model, "--device", "cpu"], input=lines, capture_output=True, text=True,
                       check=True)
    return np.array([json.loads(line)["embedding"] for line in r.stdout.splitlines() if line.strip()])


def theirs(onnx):
    enc = tok(texts, padding=True, return_tensors="np")
    session = ort.InferenceSession(f"{M}/onnx/{onnx}")
    h = session.run(None, {i.name: enc[i.name] for i in session.get_inputs()})[0]
    mask = enc["attention_mask"][..., None]
    v = (h * mask).sum(1) / mask.sum(1)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


ref = SentenceTransformer(M, device="cpu").encode(texts, convert_to_numpy=True)
for name, v in [("bertgpu f32", ours(M)), ("bertgpu q8_0", ours(f"bench/models/{NAME}.q8_0.gguf")),
                ("onnx fp32 (transformers.js fp32)", theirs("model.onnx")),
                ("onnx q8 (transformers.js q8)", theirs("model_quantized.onnx"))]:
    c = (v * ref).sum(1) / np.linalg.norm(v, axis=1) / np.linalg.norm(ref, axis=1)
    print(f"{name}: cosine to sentence-transformers min {c.min():.5f}, mean {c.mean():.5f}")
