#!/usr/bin/env python3
"""Golden for continued pre-training (masked LM) of BERT's relatives, each with its own masked-LM head, as
tests/golden/pretrain.py does for BERT and with tests/golden/finetune_families.py's run (read both docstrings: the
same float64 train-mode run with every dropout 0, the same five AdamW steps with transformers' Trainer's parameter
groups and clipping, the same recorded fields, 10 significant digits).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/pretrain_families.py

It writes tests/golden/pretrain_families.json with one case per family, on a committed tiny checkpoint loaded with the
family's own `...ForMaskedLM` class and tokenized by its own tokenizer:

  roberta     tiny-roberta-mlm      RobertaForMaskedLM (lm_head.dense, lm_head.layer_norm, the decoder tied to the
                                    word embeddings, lm_head.bias; the exact GELU)
  xlmr        tiny-xlmr-mlm         XLMRobertaForMaskedLM (hidden_act gelu_new in the encoder, the exact GELU in
                                    lm_head)
  camembert   tiny-camembert-mlm    CamembertForMaskedLM
  distilbert  tiny-distilbert-mlm   DistilBertForMaskedLM (vocab_transform, vocab_layer_norm, vocab_projector tied)
  albert      tiny-albert-mlm       AlbertForMaskedLM (predictions.dense maps H 32 → E 16, its LayerNorm is over E,
                                    the decoder is the (V, E) embeddings; one layer run by every pass)
  albert_sop  tiny-albert-pretraining  AlbertForPreTraining: the masked LM and sentence-order prediction
                                    (albert.pooler + tanh on the first token, then sop_classifier.classifier; the loss
                                    is the sum). The checkpoint is made here: tiny-albert-mlm's config and weights, its
                                    pooler and sop_classifier transformers' initialisation under torch.manual_seed(0),
                                    saved with save_pretrained and the tokenizer files copied.
  electra     tiny-electra-generator  ElectraForMaskedLM (generator_predictions.dense maps H 32 → E 16, its LayerNorm
                                    over E, the exact GELU whatever hidden_act says; generator_lm_head tied to the
                                    (V, E) word embeddings, its bias the MLM bias; the encoder's input goes through
                                    embeddings_project E → H)

The sentence-order case's batch is three pairs of consecutive sentences of one text, the second and third swapped
(`sentence_order_label` 1: `[CLS] B [SEP] A [SEP]`, token types 1 on the second segment), masked as below.

The batch: three single sentences padded to the longest. The masking is fixed, as pretrain.py's: every fourth
non-special token of each row from the second is selected (its label the original id), and of those the first
becomes the mask token, the second another given token, the third stays as it is, in turn. The loss is the model's
own: mean cross-entropy over the selected tokens. The word embeddings, which the decoder is tied to, are named as
the input table (`roberta.embeddings.word_embeddings.weight`) even where transformers' `named_parameters()` gives
the tied tensor the decoder's name first (XLM-R, CamemBERT).
"""
import os
import shutil
import sys

import torch
from transformers import (
    AlbertConfig,
    AlbertForMaskedLM,
    AlbertForPreTraining,
    CamembertForMaskedLM,
    DistilBertForMaskedLM,
    ElectraForMaskedLM,
    RobertaForMaskedLM,
    XLMRobertaForMaskedLM,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as ff  # noqa: E402  (load, check_batch, run: the same run as the fine-tuning goldens)

OUT = os.path.join(ff.ROOT, "tests", "golden", "pretrain_families.json")

TEXTS = [
    "the man went to the store and he bought a gallon of milk.",
    "my name is sarah and i live in london.",
    "what time is it? it is five o'clock.",
]
# (first segment, second segment, sentence_order_label): consecutive sentences, swapped where the label is 1.
SOP = [
    ("the man went to the store.", "he bought a gallon of milk.", 0),
    ("it is five o'clock.", "what time is it?", 1),
    ("i live in london.", "my name is sarah and", 1),
]


def make_albert_pretraining():
    """tests/models/tiny-albert-pretraining: tiny-albert-mlm as AlbertForPreTraining, its pooler and sentence-order
    head transformers' initialisation (seeded)."""
    src = os.path.join(ff.MODELS, "tiny-albert-mlm")
    dst = os.path.join(ff.MODELS, "tiny-albert-pretraining")
    cfg = AlbertConfig.from_pretrained(src)
    cfg.architectures = ["AlbertForPreTraining"]
    torch.manual_seed(0)
    model, info = AlbertForPreTraining.from_pretrained(src, config=cfg, output_loading_info=True)
    new = sorted(info["missing_keys"])
    assert all(k.startswith(("albert.pooler.", "sop_classifier.")) for k in new) and len(new) == 4, new
    os.makedirs(dst, exist_ok=True)
    model.save_pretrained(dst)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), os.path.join(dst, f))


def case(name, cls, model_dir, types, pairs=None, runner=ff.run, loader=ff.load):
    """`loader`: ff.load, or a script's own for a model transformers has no class for (pretrain_jina.py's)."""
    model, tok = loader(cls, model_dir)
    assert model.config.tie_word_embeddings
    if pairs:
        enc = tok([a for a, _, _ in pairs], [b for _, b, _ in pairs], padding=True, return_tensors="pt",
                  return_token_type_ids=types)
        assert all(1 in r for r in enc["token_type_ids"].tolist())
    else:
        enc = tok(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=types)
    ff.check_batch(name, enc, tok)
    special = set(tok.all_special_ids)
    input_ids = enc["input_ids"].clone()
    labels = torch.full_like(input_ids, -100)
    other = tok("the", add_special_tokens=False)["input_ids"][-1]
    alt = tok("a", add_special_tokens=False)["input_ids"][-1]
    kinds = 0
    for i in range(input_ids.shape[0]):
        real = [j for j in range(input_ids.shape[1]) if int(input_ids[i, j]) not in special]
        for j in real[1::4]:
            labels[i, j] = input_ids[i, j]
            kind = kinds % 3
            kinds += 1
            if kind == 0:
                input_ids[i, j] = tok.mask_token_id
            elif kind == 1:
                input_ids[i, j] = other if int(input_ids[i, j]) != other else alt
    assert kinds >= 6, f"{name}: {kinds} selected"
    enc = dict(enc)
    enc["input_ids"] = input_ids
    targets = {"labels": labels}
    if pairs:
        targets["sentence_order_label"] = torch.tensor([y for _, _, y in pairs])
    out = runner(name, model_dir, model, enc, targets, types)
    # XLM-R's and CamemBERT's modules list lm_head before the encoder, so named_parameters() names the tied matrix
    # `lm_head.decoder.weight`; it is the word embeddings (one tensor), named as the input table here as bertgpu does.
    emb = model.get_input_embeddings().weight
    emb_name = next(n for n, p in model.named_parameters(remove_duplicate=False)
                    if p is emb and ("word_embeddings" in n or "tok_embeddings" in n))
    for n, p in model.named_parameters():
        if p is emb and n != emb_name:
            for k in ("grads", "shapes", "params_after"):
                out[k][emb_name] = out[k].pop(n)
            for k in ("no_decay", "zero_grads"):
                out[k] = [emb_name if x == n else x for x in out[k]]
    out["task"] = "pretrain"
    out["labels"] = [[int(v) for v in r] for r in labels.tolist()]
    return out


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing here is random; fixed anyway
    cases = {
        "roberta": case("roberta", RobertaForMaskedLM, "tiny-roberta-mlm", False),
        "xlmr": case("xlmr", XLMRobertaForMaskedLM, "tiny-xlmr-mlm", False),
        "camembert": case("camembert", CamembertForMaskedLM, "tiny-camembert-mlm", False),
        "distilbert": case("distilbert", DistilBertForMaskedLM, "tiny-distilbert-mlm", False),
        "albert": case("albert", AlbertForMaskedLM, "tiny-albert-mlm", True),
    }
    make_albert_pretraining()
    cases["albert_sop"] = case("albert_sop", AlbertForPreTraining, "tiny-albert-pretraining", True, pairs=SOP)
    cases["electra"] = case("electra", ElectraForMaskedLM, "tiny-electra-generator", True)
    ff.write(OUT, cases)


if __name__ == "__main__":
    main()
