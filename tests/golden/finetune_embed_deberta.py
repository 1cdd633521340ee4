#!/usr/bin/env python3
"""Golden for embedding fine-tuning of a DeBERTa-v3-like encoder (DebertaV2Model, mean pooling, L2-normalised):
sentence-transformers' MultipleNegativesRankingLoss from PyTorch autograd in float64, exactly as
tests/golden/finetune_embed.py does for BERT (read its docstring; this script reuses its pairs and scale) but on
tests/models/tiny-deberta-model loaded as `DebertaV2Model` with its own tokenizer (no token types: zeros are recorded).

Run from the repository root (needs torch and transformers):

    /work/venv/bin/python tests/golden/finetune_embed_deberta.py

It writes tests/golden/finetune_embed_deberta.json: both sides' inputs, the loss, and the gradient of every encoder
parameter under DebertaV2Model's names, the relative table's (`encoder.rel_embeddings`) and its LayerNorm's among
them.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, DebertaV2Model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_embed as fe  # noqa: E402

MODEL = os.path.join(fe.ROOT, "tests/models/tiny-deberta-model")
OUT = os.path.join(fe.ROOT, "tests/golden/finetune_embed_deberta.json")


def main():
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = DebertaV2Model.from_pretrained(MODEL, attn_implementation="eager").double()
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            assert m.p == 0.0, "dropout must be off for an exact golden"
    enc_a = tok([a for a, _ in fe.PAIRS], padding=True, return_tensors="pt")
    enc_p = tok([p for _, p in fe.PAIRS], padding=True, return_tensors="pt")
    assert "token_type_ids" not in enc_a

    def embed(enc):
        h = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).double()
        pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)

    a, p = embed(enc_a), embed(enc_p)
    loss = F.cross_entropy(a @ p.T * fe.SCALE, torch.arange(len(fe.PAIRS)))
    loss.backward()
    grads = {n: fe.flat(t.grad) for n, t in model.named_parameters() if t.grad is not None}
    shapes = {n: list(t.shape) for n, t in model.named_parameters() if t.grad is not None}
    assert not any(n.startswith("pooler") for n in grads)
    assert "encoder.rel_embeddings.weight" in grads and "encoder.LayerNorm.weight" in grads

    def side(e):
        out = {k: e[k].tolist() for k in ("input_ids", "attention_mask")}
        out["token_type_ids"] = torch.zeros_like(e["input_ids"]).tolist()
        return out

    out = {"model": "tiny-deberta-model", "scale": fe.SCALE, "anchors": side(enc_a), "positives": side(enc_p),
           "loss": float(loss.detach()), "grads": grads, "shapes": shapes, "dtype": "float64", "torch": torch.__version__}
    with open(OUT, "w") as f:
        json.dump(out, f, sort_keys=True)
        f.write("\n")
    norm = sum(sum(v * v for v in g) for g in grads.values()) ** 0.5
    print(f"embed deberta: loss {float(loss.detach()):.6f}, grad norm {norm:.6f}, {len(grads)} tensors")


if __name__ == "__main__":
    main()
