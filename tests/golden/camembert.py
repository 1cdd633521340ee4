#!/usr/bin/env python3
"""Goldens for CamemBERT and for a sharded checkpoint, from PyTorch `transformers`.

Run from the repository root (reuses roberta.py's and heads.py's inputs and helpers; needs torch, transformers 5.x,
tokenizers, safetensors):

    /path/to/venv/bin/python tests/golden/camembert.py

CamemBERT is RoBERTa's code under another name (`modeling_camembert.py` is generated from RoBERTa's, with
`base_model_prefix = "roberta"`): what tells it apart is `model_type: "camembert"`, its `Camembert*` classes and its
tokenizer, a SentencePiece Unigram whose specials are laid out as camembert-base's: `<s>NOTUSED <pad> </s>NOTUSED
<unk> <unk>NOTUSED` at ids 0..4, then `<s>` 5 and `</s>` 6 (so the framing ids are not RoBERTa's 0 and 2), `<mask>`
last; `CamembertTokenizer` builds its pipeline (Metaspace, `<s> A </s></s> B </s>`). The models are roberta.py's
seeded tiny shape (hidden 32, 2 layers, 4 heads, `pad_token_id` 1, 64 usable positions), written to:
  tests/models/tiny-camembert-mlm/          CamembertForMaskedLM
  tests/models/tiny-camembert-classifier/   CamembertForSequenceClassification, 3 labels
  tests/models/tiny-camembert-ner/          CamembertForTokenClassification
  tests/models/tiny-camembert-qa/           CamembertForQuestionAnswering
  tests/models/tiny-camembert-sharded/      tiny-camembert-mlm saved by `save_pretrained(max_shard_size=...)`:
                                            model.safetensors.index.json and its shards, the same goldens
  tests/golden/camembert.json               as roberta.json's per family: tokens, embeddings, fill-mask, classifier
                                            (pairs), token logits, QA
"""
import json
import os
import shutil
import sys

import torch
from tokenizers import AddedToken
from transformers import (AutoTokenizer, CamembertConfig, CamembertForMaskedLM, CamembertForQuestionAnswering,
                          CamembertForSequenceClassification, CamembertForTokenClassification, CamembertTokenizer)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402
import roberta as R  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "camembert.json")
SPECIALS = ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"]
# Small enough that the tiny model's 160 kB split into several files, and that a layer's query, key and value land
# in different ones.
SHARD_SIZE = "20KB"


def camembert_tokenizer(d):
    vocab = H.unigram_vocab(R.corpus(), SPECIALS, R.VOCAB_SIZE) + [("<mask>", 0.0)]
    tok = CamembertTokenizer(vocab=vocab, model_max_length=R.USABLE,
                             mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False,
                                                   special=True))
    shutil.rmtree(d, ignore_errors=True)
    tok.save_pretrained(d)
    tok = AutoTokenizer.from_pretrained(d)
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id) == (5, 6, 1), (tok.cls_token_id, tok.sep_token_id)
    return tok


def config(vocab_size, **kw):
    return R.config(CamembertConfig, vocab_size, **kw)


def main():
    ids3 = {0: "negative", 1: "neutral", 2: "positive"}
    ner_labels = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
    golden = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/roberta.rs"}
    tok_dir = os.path.join(H.MODELS, "tiny-camembert-mlm")
    tok = camembert_tokenizer(tok_dir)
    V = len(tok)
    g = {"tokens": R.token_goldens(tok)}
    torch.manual_seed(41)
    # RoBERTa's config but for bos/eos: camembert-base's config.json has bos_token_id 5, eos_token_id 6.
    m = R.perturb(CamembertForMaskedLM(config(V, architectures=["CamembertForMaskedLM"])), 141).eval()
    m.config.bos_token_id, m.config.eos_token_id = 5, 6
    R.save(m, "tiny-camembert-mlm", tok_dir)
    g["embeddings"] = H.embeddings(m.roberta, tok, R.EMBED_TEXTS)
    g["fill_mask"] = H.fill_mask(m, tok, R.FILL_MASK)

    sharded = os.path.join(H.MODELS, "tiny-camembert-sharded")
    shutil.rmtree(sharded, ignore_errors=True)
    os.makedirs(sharded)
    H.copy_tokenizer(tok_dir, sharded, R.TOKENIZER_FILES)
    m.save_pretrained(sharded, max_shard_size=SHARD_SIZE)
    with open(os.path.join(sharded, "model.safetensors.index.json"), encoding="utf-8") as fh:
        index = json.load(fh)
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3 and not os.path.exists(os.path.join(sharded, "model.safetensors")), shards
    split = [i for i in range(2) if len({v for k, v in index["weight_map"].items()
                                         if f"layer.{i}.attention.self." in k and k.endswith("weight")}) > 1]
    assert split, "every layer's query, key and value in one shard"
    print(f"tiny-camembert-sharded: {len(shards)} shards", file=sys.stderr)

    torch.manual_seed(42)
    m = R.perturb(CamembertForSequenceClassification(config(
        V, architectures=["CamembertForSequenceClassification"], id2label=ids3,
        label2id={v: k for k, v in ids3.items()})), 142).eval()
    R.save(m, "tiny-camembert-classifier", tok_dir)
    g["classifier"] = H.classify(m, tok, R.CLASSIFY_INPUTS)
    torch.manual_seed(43)
    m = R.perturb(CamembertForTokenClassification(config(
        V, architectures=["CamembertForTokenClassification"], id2label=ner_labels,
        label2id={v: k for k, v in ner_labels.items()})), 143).eval()
    R.save(m, "tiny-camembert-ner", tok_dir)
    g["ner"] = H.token_logits(m, tok)
    torch.manual_seed(44)
    m = R.perturb(CamembertForQuestionAnswering(config(V, architectures=["CamembertForQuestionAnswering"])),
                  144).eval()
    R.save(m, "tiny-camembert-qa", tok_dir)
    g["qa"] = H.qa(H.WithoutTypes(m), R.WithTypes(tok))
    golden["camembert"] = g

    H.write_golden(OUT, golden)
    print("fill-mask min top-k score gap", min(e["min_score_gap"] for e in g["fill_mask"]), file=sys.stderr)
    print("classifier min score gap", min(e["min_score_gap"] for e in g["classifier"]), file=sys.stderr)
    print("unk in embed texts", sum(e["input_ids"].count(3) for e in g["embeddings"]), file=sys.stderr)
    H.print_qa(g["qa"])


if __name__ == "__main__":
    main()
