#!/usr/bin/env python3
"""Golden for embedding fine-tuning of a DeBERTa-v3-like encoder (DebertaV2Model, mean pooling, L2-normalised):
sentence-transformers' MultipleNegativesRankingLoss from PyTorch autograd in float64, exactly as
tests/golden/finetune_embed.py does for BERT (read its docstring; this script runs its functions) but on
tests/models/tiny-deberta-model loaded as `DebertaV2Model` with its own tokenizer (no token types: zeros are recorded).

Run from the repository root (needs torch and transformers):

    /work/venv/bin/python tests/golden/finetune_embed_deberta.py

It writes tests/golden/finetune_embed_deberta.json: both sides' inputs, the loss, and the gradient of every encoder
parameter under DebertaV2Model's names, the relative table's (`encoder.rel_embeddings`) and its LayerNorm's among
them.
"""
import os
import sys

from transformers import DebertaV2Model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_embed as fe  # noqa: E402

OUT = os.path.join(fe.ROOT, "tests/golden/finetune_embed_deberta.json")


def main():
    g = fe.golden("tiny-deberta-model", DebertaV2Model, no_types=True, attn_implementation="eager")
    assert "encoder.rel_embeddings.weight" in g["grads"] and "encoder.LayerNorm.weight" in g["grads"]
    fe.save(OUT, "embed deberta", g)


if __name__ == "__main__":
    main()
