#!/usr/bin/env python3
"""Golden for head training: gradients and AdamW steps from PyTorch (`torch.optim.AdamW`, the reference).

Run from the repository root (needs torch):

    .venv/bin/python tests/golden/train.py      # or any python with torch

It writes tests/golden/train.json with two cases, each from a fixed seeded feature batch X (stored), integer labels,
and a fixed initial head (stored):

  linear   the default head: Z = X·Wᵀ + b, X (8, 384) (all-MiniLM-L6-v2's hidden size), 3 classes
  hidden   one hidden layer with exact GELU: Z = GELU(X·W1ᵀ + b1)·W2ᵀ + b2, X (8, 48), 16 hidden units, 4 classes

and for each: the loss and the parameter gradients at the initial head, the parameters after 1 AdamW step, and after
`steps` steps on the same batch (bias corrections change every step, so a wrong correction shows after a few).
Loss: F.cross_entropy (mean over the batch). Optimiser: torch.optim.AdamW(params, lr, weight_decay) with its default
betas (0.9, 0.999) and eps 1e-8, over every parameter (biases decay too, as with model.parameters()). The
single-tensor (for-loop) implementation is forced so the order of operations is the documented one.
"""
import json
import os

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.json")


def flat(t):
    return [float(f"{v:.9g}") for v in t.detach().reshape(-1).tolist()]


def run(case, x, y, params, forward, lr, wd, steps):
    params = [p.clone().requires_grad_(True) for p in params]
    init = [flat(p) for p in params]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd, foreach=False)
    loss0 = F.cross_entropy(forward(x, params), y)
    opt.zero_grad()
    loss0.backward()
    grads = [flat(p.grad) for p in params]
    opt.step()
    after1 = [flat(p) for p in params]
    for _ in range(steps - 1):
        opt.zero_grad()
        F.cross_entropy(forward(x, params), y).backward()
        opt.step()
    after = [flat(p) for p in params]
    return {
        "case": case,
        "x": flat(x),
        "rows": x.shape[0],
        "cols": x.shape[1],
        "labels": y.tolist(),
        "shapes": [list(p.shape) for p in params],
        "lr": lr,
        "weight_decay": wd,
        "steps": steps,
        "loss": float(loss0.detach()),
        "init": init,
        "grads": grads,
        "after_1": after1,
        "after_steps": after,
    }


def linear_init(gen, fan_out, fan_in):
    bound = 1.0 / fan_in ** 0.5
    w = (torch.rand(fan_out, fan_in, generator=gen) * 2 - 1) * bound
    b = (torch.rand(fan_out, generator=gen) * 2 - 1) * bound
    return w, b


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20261122)
    cases = []

    # Features scaled like mean-pooled MiniLM vectors (|x_i| around 0.1..0.5).
    x = torch.randn(8, 384, generator=gen) * 0.3
    y = torch.tensor([0, 1, 2, 0, 1, 2, 2, 0])
    w, b = linear_init(gen, 3, 384)
    cases.append(run("linear", x, y, [w, b], lambda x, p: x @ p[0].T + p[1], lr=1e-2, wd=0.01, steps=5))

    x = torch.randn(8, 48, generator=gen)
    y = torch.tensor([3, 1, 0, 2, 1, 3, 0, 0])
    w1, b1 = linear_init(gen, 16, 48)
    w2, b2 = linear_init(gen, 4, 16)
    fwd = lambda x, p: F.gelu(x @ p[0].T + p[1]) @ p[2].T + p[3]
    cases.append(run("hidden", x, y, [w1, b1, w2, b2], fwd, lr=3e-3, wd=0.1, steps=5))

    with open(OUT, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
