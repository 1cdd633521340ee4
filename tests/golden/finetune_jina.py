#!/usr/bin/env python3
"""Golden for full-encoder fine-tuning of JinaBERT v2: tests/golden/finetune_families.py's run (read its docstring:
the same batches, a float64 train-mode run with every dropout 0, the same five AdamW steps with transformers'
Trainer's parameter groups and clipping, the same recorded fields) on tests/models/tiny-jina-classifier
(JinaBertForSequenceClassification: ALiBi over 6 heads, `mlp.gated_layers` with reglu, the pooler and
`classifier`), through tests/golden/jina.py's float64 transcription of the authors' code (transformers has no
JinaBERT class). The loss is `JinaBertForSequenceClassification`'s single-label cross-entropy; the optimiser
`torch.optim.AdamW`, clipping `torch.nn.utils.clip_grad_norm_`; the names are the checkpoint's.

Run from the repository root after jina.py (needs torch 2.x; transformers for the tokenizer only):

    /work/venv/bin/python tests/golden/finetune_jina.py

It writes tests/golden/finetune_jina.json: `jina_classify` (CLASSIFY's texts) and `jina_pair` (PAIR's text pairs,
token types 1 on the second segment); and under `embeddings`, `jina`: embedding training as
tests/golden/finetune_embed.py has it for BERT (MultipleNegativesRankingLoss on mean-pooled, normalised vectors,
scale 20, its 4 pairs; the loss and every encoder parameter's gradient, the unused pooler left out) on
tests/models/tiny-jina-model (JinaBertModel: 4 heads, geglu).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_embed as E  # noqa: E402
import finetune_families as F  # noqa: E402
import jina as J  # noqa: E402

OUT = os.path.join(F.ROOT, "tests", "golden", "finetune_jina.json")
NAME = "tiny-jina-classifier"


def load():
    d = os.path.join(F.MODELS, NAME)
    with open(os.path.join(d, "config.json")) as fh:
        c = json.load(fh)
    assert c["hidden_dropout_prob"] == 0.0 and c["attention_probs_dropout_prob"] == 0.0
    model = J.JinaBertForSequenceClassification(c)
    sd = load_file(os.path.join(d, "model.safetensors"))
    assert set(sd) == set(model.state_dict()), "the checkpoint's names are the module's"
    model.load_state_dict({k: v.to(J.DT) for k, v in sd.items()})
    return model.to(J.DT).train(), AutoTokenizer.from_pretrained(d)


def decay_names(model):
    """transformers' Trainer: not the biases, not the parameters of LayerNorm modules."""
    in_norm = set()
    for mn, m in model.named_modules():
        if isinstance(m, torch.nn.LayerNorm):
            in_norm.update(f"{mn}.{pn}" for pn, _ in m.named_parameters(recurse=False))
    return [n for n, _ in model.named_parameters() if n not in in_norm and not n.endswith("bias")]


def run(case, enc, labels):
    """finetune_families.run with this module's loss."""
    model, _ = load()
    batch = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    named = list(model.named_parameters())
    decay = set(decay_names(model))
    groups = [{"params": [p for n, p in named if n in decay], "weight_decay": F.WD},
              {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=F.LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    losses, norms, grads, zero_grads = [], [], None, None
    for step in range(F.STEPS):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(**batch), labels)
        loss.backward()
        assert all(p.grad is not None for _, p in named), f"{case}: a parameter got no gradient"
        if step == 0:
            grads = {n: F.flat(p.grad) for n, p in named}
            total = torch.sqrt(sum((p.grad ** 2).sum() for _, p in named))
            zero_grads = [n for n, p in named if p.grad.norm() < 1e-10 * total]
        losses.append(float(f"{loss.item():.17g}"))
        norms.append(float(f"{torch.nn.utils.clip_grad_norm_([p for _, p in named], F.MAX_NORM).item():.17g}"))
        opt.step()
    ids = enc["input_ids"]
    return {"model": NAME, "family": "bert", "task": "sequence", "input_ids": F.rows(ids),
            "token_type_ids": F.rows(enc["token_type_ids"]), "attention_mask": F.rows(enc["attention_mask"]),
            "loss": losses[0], "grads": grads, "shapes": {n: list(p.shape) for n, p in named}, "lr": F.LR,
            "weight_decay": F.WD, "max_norm": F.MAX_NORM, "steps": F.STEPS,
            "no_decay": [n for n, _ in named if n not in decay], "zero_grads": zero_grads, "losses": losses,
            "grad_norms": norms, "params_after": {n: F.flat(p) for n, p in named}, "labels": labels.tolist()}


def embed_case(name="tiny-jina-model"):
    """finetune_embed.py's loss on the bare model, its gradients under the checkpoint's names."""
    d = os.path.join(F.MODELS, name)
    with open(os.path.join(d, "config.json")) as fh:
        c = json.load(fh)
    model = J.JinaBertModel(c)
    sd = load_file(os.path.join(d, "model.safetensors"))
    assert set(sd) == set(model.state_dict())
    model.load_state_dict({k: v.to(J.DT) for k, v in sd.items()})
    model = model.to(J.DT).train()
    tok = AutoTokenizer.from_pretrained(d)
    enc_a, enc_p = E.sides(tok)

    def embed(enc):
        h, _ = model(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])
        mask = enc["attention_mask"].unsqueeze(-1).to(J.DT)
        return torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1).clamp(min=1e-9), p=2, dim=1)

    loss = torch.nn.functional.cross_entropy(embed(enc_a) @ embed(enc_p).T * E.SCALE, torch.arange(len(E.PAIRS)))
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if not n.startswith("pooler")}
    assert all(g is not None for g in grads.values())
    return {"model": name, "family": "bert", "scale": E.SCALE, "anchors": E.side(enc_a), "positives": E.side(enc_p),
            "loss": float(f"{loss.item():.17g}"), "grads": {n: F.flat(g) for n, g in grads.items()}}


def main():
    torch.set_num_threads(1)
    _, tok = load()
    enc = tok([t for t, _ in F.CLASSIFY], padding=True, return_tensors="pt")
    F.check_batch("jina_classify", enc, tok)
    cases = {"jina_classify": run("jina_classify", enc, torch.tensor([y for _, y in F.CLASSIFY]))}
    enc = tok([a for a, _, _ in F.PAIR], [b for _, b, _ in F.PAIR], padding=True, return_tensors="pt")
    assert all(1 in r for r in enc["token_type_ids"].tolist())
    F.check_batch("jina_pair", enc, tok)
    cases["jina_pair"] = run("jina_pair", enc, torch.tensor([y for _, _, y in F.PAIR]))
    F.write(OUT, cases, {"jina": embed_case()})


if __name__ == "__main__":
    main()
