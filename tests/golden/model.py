#!/usr/bin/env python3
"""Model goldens from PyTorch `transformers` for tests/model_cpu.rs.

Run from the repository root (needs torch + transformers + safetensors, and ./models from scripts/fetch-models.sh):
    python tests/golden/model.py
Writes tests/golden/model.json. CI never runs this; it reads the committed JSON.

For all-MiniLM-L6-v2 (BertModel) and splade-tiny (BertForMaskedLM, legacy LayerNorm.gamma/beta names) it stores, for
a few sentences of different lengths run as ONE padded batch:
  - the token ids of each sentence (unpadded), so the Rust tests can build the same batch without the tokenizer;
  - rows of the last hidden state: the first ([CLS]) and the last real token ([SEP]) of every sentence, and one
    middle row;
  - MiniLM only: the sentence-transformers embedding (mean over real tokens, then L2-normalised), full vectors,
    and the unnormalised [CLS] row is part of the hidden rows above.
"""
import json
import os
import sys

import torch
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.manual_seed(0)
torch.set_num_threads(2)

SENTENCES = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "Résumé of a naïve café owner in Zürich, written in 2024 — with emoji 🙂 and CJK 東京.",
    "BERT encodes every token of a sentence with bidirectional self-attention; mean pooling over the real tokens "
    "(never the padding) gives a sentence embedding that can be compared with cosine similarity, which is what "
    "semantic search, clustering and deduplication use. This sentence is long on purpose so that the batch has "
    "plenty of padding for the shorter ones.",
    "a",
]


def g(x):
    """Seven significant digits: far below the 1e-4 tolerance, and a small file."""
    return [float("%.7g" % v) for v in x]


def run(name, model_cls, sub):
    path = os.path.join(ROOT, "models", name)
    tok = AutoTokenizer.from_pretrained(path)
    model, info = model_cls.from_pretrained(path, output_loading_info=True)
    missing = [k for k in info["missing_keys"] if "decoder" not in k]  # tied decoder: absent from the file by design
    if missing:
        sys.exit(f"{name}: weights missing when loading in transformers: {missing}")
    model.eval()
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=512, return_tensors="pt")
    with torch.no_grad():
        bert = getattr(model, sub) if sub else model
        hidden = bert(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                      token_type_ids=enc["token_type_ids"]).last_hidden_state  # (B, T, H)
    mask = enc["attention_mask"]
    out = {"sentences": SENTENCES, "hidden_size": hidden.shape[-1], "padded_len": hidden.shape[1],
           "input_ids": [], "rows": []}
    for i in range(len(SENTENCES)):
        n = int(mask[i].sum())
        out["input_ids"].append(enc["input_ids"][i, :n].tolist())
        for t in sorted({0, n // 2, n - 1}):
            out["rows"].append({"sentence": i, "token": t, "values": g(hidden[i, t].tolist())})
    m = mask.unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)  # sentence-transformers' Pooling(mean)
    out["mean"] = [g(v) for v in mean.tolist()]
    out["mean_normalized"] = [g(v) for v in torch.nn.functional.normalize(mean, p=2, dim=1).tolist()]
    return out


goldens = {
    "all-MiniLM-L6-v2": run("all-MiniLM-L6-v2", AutoModel, None),
    "splade-tiny": run("splade-tiny", AutoModelForMaskedLM, "bert"),
}
dest = os.path.join(ROOT, "tests", "golden", "model.json")
with open(dest, "w") as f:
    json.dump(goldens, f, separators=(",", ":"))
print(f"wrote {dest} ({os.path.getsize(dest)} bytes)")
