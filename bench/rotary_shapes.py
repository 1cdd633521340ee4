#!/usr/bin/env python3
"""Seeded random checkpoints of one shape in four families, for `bench/rotary_speed.sh`: a BERT, a NomicBERT
(rotary, SwiGLU, no biases), a GTE (rotary, GeGLU) and a ModernBERT (pre-LN, rotary with two thetas, GeGLU, no
biases, layers 1, 2, 4 and 5 local with ModernBERT-base's window of 128) of all-MiniLM-L6-v2's shape (6 layers,
hidden 384, 12 heads, feed-forward 1536, its vocabulary and tokenizer), written to OUT/{bert,nomic,gte,modernbert}
(default /tmp/rotbench).

    /path/to/venv/bin/python bench/rotary_shapes.py [OUT]
"""
import os
import shutil
import sys

import torch
from transformers import (BertConfig, BertModel, GteConfig, GteModel, ModernBertConfig, ModernBertModel,
                          NomicBertConfig, NomicBertModel)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINILM = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/rotbench"
SHAPE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
             max_position_embeddings=512, type_vocab_size=2, pad_token_id=0)

for name, model in [
    ("bert", BertModel(BertConfig(**SHAPE, architectures=["BertModel"]))),
    ("nomic", NomicBertModel(NomicBertConfig(**SHAPE, architectures=["NomicBertModel"]))),
    ("gte", GteModel(GteConfig(**SHAPE, architectures=["GteModel"]))),
    ("modernbert", ModernBertModel(ModernBertConfig(**SHAPE, architectures=["ModernBertModel"], local_attention=128,
                                                    global_attn_every_n_layers=3))),
]:
    torch.manual_seed(0)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    model.eval().save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(os.path.join(MINILM, f), d)
    print(d, file=sys.stderr)
