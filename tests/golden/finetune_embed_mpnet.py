#!/usr/bin/env python3
"""Golden for embedding fine-tuning of an MPNet (all-mpnet-base-v2's architecture: MPNetModel, mean pooling,
L2-normalised): sentence-transformers' MultipleNegativesRankingLoss from PyTorch autograd in float64, exactly as
tests/golden/finetune_embed.py does for BERT (read its docstring; this script runs its functions) but on
tests/models/tiny-mpnet-model loaded as `MPNetModel` with its own tokenizer (no token types: zeros are recorded).

Run from the repository root (needs torch and transformers):

    /work/venv/bin/python tests/golden/finetune_embed_mpnet.py

It writes tests/golden/finetune_embed_mpnet.json: both sides' inputs, the loss, and the gradient of every encoder
parameter under MPNetModel's names (the pooler, unused, has none), the relative position bias table's among them.
"""
import os
import sys

from transformers import MPNetModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_embed as fe  # noqa: E402

OUT = os.path.join(fe.ROOT, "tests/golden/finetune_embed_mpnet.json")


def main():
    g = fe.golden("tiny-mpnet-model", MPNetModel, no_types=True, attn_implementation="eager")
    assert "encoder.relative_attention_bias.weight" in g["grads"]
    fe.save(OUT, "embed mpnet", g)


if __name__ == "__main__":
    main()
