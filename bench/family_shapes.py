#!/usr/bin/env python3
"""Seeded random checkpoints of one shape in every family that trains, for `bench/train_families.sh`: BERT,
DistilBERT, RoBERTa, ALBERT, ELECTRA, MPNet, DeBERTa-v3 (256 buckets over 512 positions, c2p + p2c), ModernBERT
(layers 1, 2, 4, 5 local, window 128), NomicBERT (rotary, SwiGLU), GTE (rotary, GeGLU) and JinaBERT v2 (ALiBi, GeGLU:
its authors' code as tests/golden/jina.py restates it, in their hub layout), each of all-MiniLM-L6-v2's
shape (6 layers, hidden 384, 12 heads, feed-forward 1536, its vocabulary and tokenizer; ALBERT with embedding size
128 and its one shared layer, ELECTRA's embeddings 128 wide through its projection as the small models have them),
written to OUT/<family> (default /tmp/familybench).

A gated feed-forward (`[up | gate]`, ModernBERT, NomicBERT, GTE, JinaBERT) of the same `intermediate_size` does
1.5× the feed-forward's multiply-adds (3·I·H against BERT's 2·I·H). `--equal-work` gives those four families
`intermediate_size` 1024 instead, so each layer does exactly BERT's multiply-adds (the form real gated checkpoints
take: ModernBERT-base's 1152 at hidden 768).

    /path/to/venv/bin/python bench/family_shapes.py [OUT] [--equal-work]
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import (AlbertConfig, AlbertModel, BertConfig, BertModel, DebertaV2Config, DebertaV2Model,
                          DistilBertConfig, DistilBertModel, ElectraConfig, ElectraModel, GteConfig, GteModel,
                          ModernBertConfig, ModernBertModel, MPNetConfig, MPNetModel, NomicBertConfig, NomicBertModel,
                          RobertaConfig, RobertaModel)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINILM = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
ARGS = [a for a in sys.argv[1:] if a != "--equal-work"]
OUT = ARGS[0] if ARGS else "/tmp/familybench"
SHAPE = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
             max_position_embeddings=514, type_vocab_size=2, pad_token_id=0)
GATED = {**SHAPE, "intermediate_size": 1024} if "--equal-work" in sys.argv else SHAPE


def arch(cls, **kw):
    return dict(architectures=[cls.__name__], **kw)


FAMILIES = [
    ("bert", BertModel, BertConfig(**SHAPE, **arch(BertModel))),
    ("distilbert", DistilBertModel, DistilBertConfig(
        vocab_size=30522, dim=384, n_layers=6, n_heads=12, hidden_dim=1536, max_position_embeddings=512,
        pad_token_id=0, **arch(DistilBertModel))),
    ("roberta", RobertaModel, RobertaConfig(**{**SHAPE, "type_vocab_size": 1, "pad_token_id": 1},
                                            **arch(RobertaModel))),
    ("albert", AlbertModel, AlbertConfig(**SHAPE, embedding_size=128, **arch(AlbertModel))),
    ("electra", ElectraModel, ElectraConfig(**SHAPE, embedding_size=128, **arch(ElectraModel))),
    ("mpnet", MPNetModel, MPNetConfig(**{**SHAPE, "pad_token_id": 1}, **arch(MPNetModel))),
    ("deberta", DebertaV2Model, DebertaV2Config(
        **{**SHAPE, "type_vocab_size": 0}, relative_attention=True, position_buckets=256, max_relative_positions=512,
        norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
        layer_norm_eps=1e-7, **arch(DebertaV2Model))),
    ("modernbert", ModernBertModel, ModernBertConfig(**GATED, local_attention=128, global_attn_every_n_layers=3,
                                                     **arch(ModernBertModel))),
    ("nomic", NomicBertModel, NomicBertConfig(**GATED, **arch(NomicBertModel))),
    ("gte", GteModel, GteConfig(**GATED, **arch(GteModel))),
]

for name, cls, config in FAMILIES:
    torch.manual_seed(0)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    cls(config).eval().save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(os.path.join(MINILM, f), d)
    print(d, file=sys.stderr)

# JinaBERT v2: no transformers class; the golden script's float64 restatement of its authors' modules, saved in f32.
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import jina  # noqa: E402

config = jina.config(SHAPE["vocab_size"], SHAPE["num_attention_heads"], SHAPE["hidden_size"],
                     GATED["intermediate_size"], "geglu", "JinaBertModel")
config.update(num_hidden_layers=SHAPE["num_hidden_layers"], hidden_dropout_prob=0.1,
              max_position_embeddings=SHAPE["max_position_embeddings"],
              model_max_length=SHAPE["max_position_embeddings"], initializer_range=0.02)
torch.manual_seed(0)
model = jina.JinaBertModel(config)
d = os.path.join(OUT, "jina")
shutil.rmtree(d, ignore_errors=True)
os.makedirs(d)
save_file({k: v.float().contiguous() for k, v in model.state_dict().items()}, os.path.join(d, "model.safetensors"),
          metadata={"format": "pt"})
with open(os.path.join(d, "config.json"), "w") as fh:
    json.dump(config, fh, indent=2)
for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
    shutil.copy(os.path.join(MINILM, f), d)
print(d, file=sys.stderr)
