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

The other families' embedding goldens (finetune_embed_deberta.py, finetune_embed_mpnet.py, finetune_rotary.py,
finetune_modernbert.py) are this computation on their own encoders: they reuse its functions.
"""
import json
import os

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def encoder(cls, model_dir, **load_args):
    """`cls.from_pretrained(model_dir)` in float64 and train mode, every dropout checked to be 0."""
    model = cls.from_pretrained(model_dir, **load_args).double()
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            assert m.p == 0.0, "dropout must be off for an exact golden"
    return model


def sides(tok, types=None):
    """The anchors and the positives of PAIRS, each side tokenized on its own and padded to its longest text
    (`types`: return_token_type_ids; None leaves it to the tokenizer)."""
    kw = {} if types is None else {"return_token_type_ids": types}
    return [tok([pair[k] for pair in PAIRS], padding=True, return_tensors="pt", **kw) for k in (0, 1)]


def embed(model, enc):
    """sentence-transformers' mean pooling over the real tokens, L2-normalised."""
    h = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).double()
    pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return F.normalize(pooled, p=2, dim=1)


def backward(model, enc_a, enc_p):
    """MultipleNegativesRankingLoss on the two sides, its gradients accumulated into `model`; the loss."""
    a, p = embed(model, enc_a), embed(model, enc_p)
    loss = F.cross_entropy(a @ p.T * SCALE, torch.arange(len(PAIRS)))
    loss.backward()
    return loss


def side(enc):
    """One side's inputs as recorded: zeros for the token types of a tokenizer that gives none."""
    ids = enc["input_ids"]
    types = enc["token_type_ids"] if "token_type_ids" in enc else torch.zeros_like(ids)
    return {"input_ids": ids.tolist(), "token_type_ids": types.tolist(),
            "attention_mask": enc["attention_mask"].tolist()}


def golden(model_dir, cls, no_types=False, **load_args):
    """The golden of one bare encoder, `cls` on tests/models/`model_dir` with its own tokenizer: both sides' inputs,
    the loss and every encoder parameter's gradient under `named_parameters()`'s names (the pooler, unused, has
    none). `no_types`: the tokenizer must give no token types (zeros are recorded)."""
    torch.manual_seed(0)
    path = os.path.join(ROOT, "tests/models", model_dir)
    tok = AutoTokenizer.from_pretrained(path)
    model = encoder(cls, path, **load_args)
    enc_a, enc_p = sides(tok)
    assert not no_types or "token_type_ids" not in enc_a
    loss = backward(model, enc_a, enc_p)
    grads = {n: flat(t.grad) for n, t in model.named_parameters() if t.grad is not None}
    shapes = {n: list(t.shape) for n, t in model.named_parameters() if t.grad is not None}
    assert not any(n.startswith("pooler") for n in grads)
    return {"model": model_dir, "scale": SCALE, "anchors": side(enc_a), "positives": side(enc_p),
            "loss": float(loss), "grads": grads, "shapes": shapes, "dtype": "float64", "torch": torch.__version__}


def save(out, name, golden):
    with open(out, "w") as f:
        json.dump(golden, f, sort_keys=True)
        f.write("\n")
    norm = sum(sum(v * v for v in g) for g in golden["grads"].values()) ** 0.5
    print(f"{name}: loss {golden['loss']:.6f}, grad norm {norm:.6f}, {len(golden['grads'])} tensors")


def main():
    save(OUT, "embed", golden("tiny-classifier", BertModel))


if __name__ == "__main__":
    main()
