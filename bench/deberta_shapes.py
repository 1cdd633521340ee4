#!/usr/bin/env python3
"""Two random models of one size for `bertgpu bench`: a DeBERTa-v3-shaped one (no absolute positions, no token
types, relative attention with DeBERTa-v3's 256 buckets over 512 positions, the LayerNorm'd relative table, c2p +
p2c) and a BERT of the same hidden size, layers, heads and feed-forward (MiniLM-L6's: 384, 6, 12, 1536), both with
the tiny Unigram tokenizer of tests/models/tiny-albert-mlm (the bench cuts its texts to --seq tokens, so the
vocabulary does not matter). Random weights: speed only, never correctness.

    /path/to/venv/bin/python bench/deberta_shapes.py /tmp/bench-shapes
    target/release/bertgpu bench --model /tmp/bench-shapes/deberta --batch 8 --seq 128 --reps 5
    target/release/bertgpu bench --model /tmp/bench-shapes/bert --batch 8 --seq 128 --reps 5
"""
import os
import shutil
import sys

import torch
from transformers import BertConfig, BertModel, DebertaV2Config, DebertaV2Model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "tests", "models", "tiny-albert-mlm")
SIZE = dict(vocab_size=600, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
            max_position_embeddings=512, pad_token_id=0)


def save(model, d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, f), os.path.join(d, f))
    model.eval().save_pretrained(d)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/bench-shapes"
    torch.manual_seed(0)
    save(DebertaV2Model(DebertaV2Config(
        **SIZE, type_vocab_size=0, relative_attention=True, position_buckets=256, max_relative_positions=512,
        norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
        layer_norm_eps=1e-7)), os.path.join(out, "deberta"))
    save(BertModel(BertConfig(**SIZE, type_vocab_size=2)), os.path.join(out, "bert"))
    print(f"wrote {out}/deberta and {out}/bert", file=sys.stderr)


if __name__ == "__main__":
    main()
