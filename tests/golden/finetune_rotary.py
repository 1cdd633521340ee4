#!/usr/bin/env python3
"""Golden for full-encoder fine-tuning of the rotary families, NomicBERT and GTE: tests/golden/finetune_families.py's
run (read its docstring: the same batches, the same float64 train-mode run with every dropout 0, the same five AdamW
steps with transformers' Trainer's parameter groups and clipping, the same recorded fields), on their tiny
checkpoints (tests/golden/rotary.py made them), with transformers 5's own classes (`models/gte`, `models/nomic_bert`;
no remote code).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/finetune_rotary.py

It writes tests/golden/finetune_rotary.json:

  gte_classify    tiny-gte-classifier    GteForSequenceClassification (rotary, GeGLU with no bias on
                                         `up_gate_proj`, pooler + tanh)
  gte_pair        tiny-gte-classifier    the same on text pairs (token_type_ids 1 on the second segment)
  gte_ner         tiny-gte-ner           GteForTokenClassification
  nomic_classify  tiny-nomic-classifier  NomicBertForSequenceClassification (rotary, SwiGLU, no bias in the layers)
  nomic_pair      tiny-nomic-classifier  the same on text pairs
  nomic_ner       tiny-nomic-ner         NomicBertForTokenClassification

and under `embeddings`, embedding training as tests/golden/finetune_embed.py has it for BERT (MultipleNegativesRankingLoss
on mean-pooled, normalised vectors, scale 20, 4 pairs; its loss and every encoder parameter's gradient):

  gte    tiny-gte-model    GteModel (type_vocab_size 0: no token-type table)
  nomic  tiny-nomic-model  NomicBertModel

transformers' modules split what the checkpoints pack: `q_proj`/`k_proj`/`v_proj` are stored as one `qkv_proj`
(`attn.Wqkv`), GTE's `gate_proj`/`up_proj` as `up_gate_proj` (its conversion mapping packs and unpacks them on save
and load). The gradients, the parameters after the steps, the shapes and the decay set are recorded under the
checkpoint's names, by transformers' own save: a copy of the model holding the gradients (or the decay flags) in
place of its weights, written with `save_pretrained` and read back. Gradients of the zero set are those below 1e-10
of the global norm, under the checkpoint's names (GTE's key bias is a third of the packed `qkv_proj.bias`, so no
name is zero there).
"""
import copy
import os
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import (AutoTokenizer, GteForSequenceClassification, GteForTokenClassification, GteModel,
                          NomicBertForSequenceClassification, NomicBertForTokenClassification, NomicBertModel)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_embed as E  # noqa: E402
import finetune_families as F  # noqa: E402

OUT = os.path.join(F.ROOT, "tests", "golden", "finetune_rotary.json")


def saved(model, values):
    """`values` (transformers' parameter name → tensor) under the checkpoint's names, by transformers' own save."""
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for n, p in clone.named_parameters():
            p.copy_(values[n])
    with tempfile.TemporaryDirectory() as d:
        clone.save_pretrained(d)
        return load_file(os.path.join(d, "model.safetensors"))


def run(case, name, model, enc, labels, types):
    """finetune_families.run, its records renamed to the checkpoint's names."""
    named = list(model.named_parameters())
    # One gradient at the start (the same batch, a fresh copy: run() steps the model).
    probe = copy.deepcopy(model)
    batch = {k: enc[k] for k in ("input_ids", "attention_mask")}
    if types:
        batch["token_type_ids"] = enc["token_type_ids"]
    batch.update(labels)
    probe(**batch).loss.backward()
    grads = saved(probe, {n: p.grad for n, p in probe.named_parameters()})
    out = F.run(case, name, model, enc, labels, types)
    decay = set(F.decay_names(model))
    flags = saved(model, {n: torch.full_like(p, 1.0 if n in decay else 0.0) for n, p in named})
    for n, t in flags.items():
        assert bool((t == t.reshape(-1)[0]).all()), f"{case}: {n} packs decayed and undecayed parameters"
    after = saved(model, {n: p.detach() for n, p in named})
    total = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    assert abs(out["grad_norms"][0] - total.item()) <= 1e-9 * total.item(), f"{case}: the renamed gradients' norm"
    out["grads"] = {n: F.flat(g) for n, g in grads.items()}
    out["shapes"] = {n: list(t.shape) for n, t in after.items()}
    out["no_decay"] = sorted(n for n, t in flags.items() if t.reshape(-1)[0] == 0.0)
    out["zero_grads"] = [n for n, g in grads.items() if g.norm() < 1e-10 * total]
    out["params_after"] = {n: F.flat(t) for n, t in after.items()}
    return out


def embed_case(cls, name):
    """finetune_embed.py's loss on a bare model, its gradients under the checkpoint's names (the pooler, unused,
    left out)."""
    d = os.path.join(F.MODELS, name)
    model = E.encoder(cls, d, attn_implementation="eager")
    tok = AutoTokenizer.from_pretrained(d)
    types = getattr(model.config, "type_vocab_size", 0) > 0  # ModernBERT has no token types
    enc_a, enc_p = E.sides(tok, types)
    loss = E.backward(model, enc_a, enc_p)
    used = {n for n, p in model.named_parameters() if p.grad is not None}
    assert all(n.startswith("pooler") for n, _ in model.named_parameters() if n not in used)
    grads = saved(model, {n: p.grad if n in used else torch.zeros_like(p) for n, p in model.named_parameters()})
    grads = {n: g for n, g in grads.items() if not n.startswith("pooler")}
    return {"model": name, "family": model.config.model_type, "scale": E.SCALE, "anchors": E.side(enc_a),
            "positives": E.side(enc_p), "loss": float(f"{loss.item():.17g}"),
            "grads": {n: F.flat(g) for n, g in grads.items()}}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cases = {
        "gte_classify": F.classify_case("gte_classify", GteForSequenceClassification, "tiny-gte-classifier", True,
                                        runner=run),
        "gte_pair": F.classify_case("gte_pair", GteForSequenceClassification, "tiny-gte-classifier", True,
                                    pairs=True, runner=run),
        "gte_ner": F.ner_case("gte_ner", GteForTokenClassification, "tiny-gte-ner", True, runner=run),
        "nomic_classify": F.classify_case("nomic_classify", NomicBertForSequenceClassification,
                                          "tiny-nomic-classifier", True, runner=run),
        "nomic_pair": F.classify_case("nomic_pair", NomicBertForSequenceClassification, "tiny-nomic-classifier",
                                      True, pairs=True, runner=run),
        "nomic_ner": F.ner_case("nomic_ner", NomicBertForTokenClassification, "tiny-nomic-ner", True, runner=run),
    }
    embeddings = {"gte": embed_case(GteModel, "tiny-gte-model"), "nomic": embed_case(NomicBertModel, "tiny-nomic-model")}
    F.write(OUT, cases, embeddings)


if __name__ == "__main__":
    main()
