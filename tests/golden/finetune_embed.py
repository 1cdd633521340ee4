#!/usr/bin/env python3
"""Golden for embedding fine-tuning: sentence-transformers' MultipleNegativesRankingLoss on mean-pooled, normalised
vectors, from PyTorch autograd in float64.

Run from the repository root (needs torch and transformers):

    .venv/bin/python tests/golden/finetune_embed.py

It writes tests/golden/finetune_embed.json. The encoder is the BertModel inside tests/models/tiny-classifier (hidden
32, 2 layers, dropout 0), its pooler unused. A batch of 4 (anchor, positive) pairs, each side tokenized on its own and
padded to its longest text; each text's vector is the mean of its real tokens' last hidden states
(sentence-transformers' Pooling, mode mean), L2-normalised; scores S = 20 · cos(anchor_i, positive_j) (the loss's
default scale); loss = CrossEntropy(S, [0, 1, 2, 3]): each anchor's own positive against the other anchors'
positives as negatives. This is MultipleNegativesRankingLoss as sentence-transformers defines it (util.cos_sim,
scale 20.0, nn.CrossEntropyLoss), written out here so that the golden needs only torch.

Recorded: the inputs of both sides, the loss, and the gradient of every encoder parameter (`named_parameters()` of
BertModel, the pooler's left out: it has none), float64. The Rust test (tests/finetune_golden.rs) compares our f32
gradients per tensor by ‖ours − golden‖ / ‖golden‖.
"""
import json
import os

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests/models/tiny-classifier")
OUT = os.path.join(ROOT, "tests/golden/finetune_embed.json")
SCALE = 20.0

PAIRS = [
    ("how do i bake bread", "a simple recipe for baking bread at home"),
    ("the cat sat on the mat", "a cat is sitting on a mat"),
    ("best way to learn python", "python tutorials for beginners"),
    ("weather today", "is it going to rain this afternoon in the city"),
]


def flat(t):
    return [float(f"{v:.17g}") for v in t.detach().reshape(-1).tolist()]


def main():
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = BertModel.from_pretrained(MODEL).double()
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            assert m.p == 0.0, "dropout must be off for an exact golden"
    enc_a = tok([a for a, _ in PAIRS], padding=True, return_tensors="pt")
    enc_p = tok([p for _, p in PAIRS], padding=True, return_tensors="pt")

    def embed(enc):
        h = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).double()
        pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)

    a, p = embed(enc_a), embed(enc_p)
    scores = a @ p.T * SCALE
    loss = F.cross_entropy(scores, torch.arange(len(PAIRS)))
    loss.backward()
    grads = {n: flat(t.grad) for n, t in model.named_parameters() if t.grad is not None}
    shapes = {n: list(t.shape) for n, t in model.named_parameters() if t.grad is not None}
    assert not any(n.startswith("pooler") for n in grads)
    side = lambda e: {k: e[k].tolist() for k in ("input_ids", "token_type_ids", "attention_mask")}
    out = {"model": "tiny-classifier", "scale": SCALE, "anchors": side(enc_a), "positives": side(enc_p),
           "loss": float(loss), "grads": grads, "shapes": shapes, "dtype": "float64", "torch": torch.__version__}
    with open(OUT, "w") as f:
        json.dump(out, f, sort_keys=True)
        f.write("\n")
    norm = sum(sum(v * v for v in g) for g in grads.values()) ** 0.5
    print(f"embed: loss {float(loss):.6f}, grad norm {norm:.6f}, {len(grads)} tensors")


if __name__ == "__main__":
    main()
