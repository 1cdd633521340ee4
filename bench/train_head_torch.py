#!/usr/bin/env python3
"""The PyTorch side of the head-training quality comparison (BENCHMARKS.md): the same protocol as `bertgpu
train-head` on the same frozen all-MiniLM-L6-v2 features, then accuracy on the held-out split.

    python bench/train_head_torch.py MODEL_DIR DATA_DIR [--epochs 30 --lr 1e-3 --batch-size 16 --seed 0]

Features: transformers BertModel, mean over real tokens (attention mask), no normalisation — what bertgpu's
`--pooling mean` computes. Head: nn.Linear(H, C) with its default init; F.cross_entropy (mean); torch.optim.AdamW
(lr, weight_decay 0.01, default betas/eps); batches of 16 from a seeded shuffle each epoch; 10% of the training file
held out (seeded) for early stopping on validation loss with patience 5, keeping the best epoch's weights. Labels in
order of first appearance. Prints the held-out accuracy. Needs torch + transformers (not needed by CI).
"""
import argparse
import copy
import json
import math
import os

import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


@torch.no_grad()
def features(model, tok, texts):
    out = []
    for i in range(0, len(texts), 32):
        enc = tok(texts[i : i + 32], padding=True, truncation=True, max_length=512, return_tensors="pt")
        h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        out.append((h * m).sum(1) / m.sum(1))
    return torch.cat(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(2)
    train, test = load(os.path.join(a.data, "train.jsonl")), load(os.path.join(a.data, "test.jsonl"))
    labels = []
    for e in train:
        if e["label"] not in labels:
            labels.append(e["label"])
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModel.from_pretrained(a.model).eval()
    x = features(model, tok, [e["text"] for e in train])
    y = torch.tensor([labels.index(e["label"]) for e in train])
    xt = features(model, tok, [e["text"] for e in test])
    yt = torch.tensor([labels.index(e["label"]) for e in test])

    perm = torch.randperm(len(train))
    n_val = math.ceil(0.1 * len(train))
    vi, ti = perm[:n_val], perm[n_val:]
    head = torch.nn.Linear(x.shape[1], len(labels))
    opt = torch.optim.AdamW(head.parameters(), lr=a.lr, weight_decay=0.01)
    best, best_epoch = None, 0
    for epoch in range(1, a.epochs + 1):
        order = ti[torch.randperm(len(ti))]
        for i in range(0, len(order), a.batch_size):
            b = order[i : i + a.batch_size]
            opt.zero_grad()
            F.cross_entropy(head(x[b]), y[b]).backward()
            opt.step()
        with torch.no_grad():
            vl = F.cross_entropy(head(x[vi]), y[vi]).item()
        if best is None or vl < best[0]:
            best, best_epoch = (vl, copy.deepcopy(head.state_dict())), epoch
        elif epoch - best_epoch >= 5:
            break
    head.load_state_dict(best[1])
    with torch.no_grad():
        acc = (head(xt).argmax(1) == yt).float().mean().item()
    print(json.dumps({"torch_test_accuracy": round(acc, 4), "best_epoch": best_epoch, "test": len(test)}))


if __name__ == "__main__":
    main()
