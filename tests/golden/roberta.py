#!/usr/bin/env python3
"""Goldens for RoBERTa and XLM-RoBERTa, from PyTorch `transformers`.

Run from the repository root after heads.py (it reuses heads.py's inputs, helpers and reference QA decoding, and
tokens.py's tricky strings; needs torch, transformers 5.x, tokenizers, safetensors):

    /path/to/venv/bin/python tests/golden/roberta.py

The tokenizers are trained here, on the fortunes of tests/data and the golden texts, with the `tokenizers` library,
and saved as transformers saves its own (`save_pretrained`: tokenizer.json, tokenizer_config.json):
  - RoBERTa: byte-level BPE, `<s> <pad> </s> <unk>` at ids 0..3 as in roberta-base and `<mask>` last (lstrip, as
    roberta-base's), RobertaProcessing `<s> A </s></s> B </s>`;
  - XLM-R: SentencePiece Unigram (WhitespaceSplit + Metaspace, `<mask>` last, as XLMRobertaTokenizer builds it),
    TemplateProcessing, clean_up_tokenization_spaces on (as multilingual-e5's tokenizer_config.json has it).
The models are seeded random, hidden 32, 2 layers, 4 heads, feed-forward 64, `pad_token_id` 1, `type_vocab_size` 1,
`max_position_embeddings` 66 (64 usable positions: RoBERTa's start at pad_token_id + 1), written to:
  tests/models/tiny-roberta-mlm/          RobertaForMaskedLM (hidden_act gelu)
  tests/models/tiny-roberta-classifier/   RobertaForSequenceClassification, 3 labels
  tests/models/tiny-roberta-ner/          RobertaForTokenClassification
  tests/models/tiny-roberta-qa/           RobertaForQuestionAnswering
  tests/models/tiny-xlmr-mlm/             XLMRobertaForMaskedLM (hidden_act gelu_new: its lm_head still uses the
                                          exact GELU, which the goldens tell apart)
  tests/models/tiny-xlmr-classifier/      XLMRobertaForSequenceClassification, 3 labels
  tests/models/tiny-xlmr-model/           XLMRobertaModel with its pooler, as multilingual-e5 and bge-m3 ship
  tests/golden/roberta.json               per family: token ids and offsets of tricky texts (pairs, truncation),
                                          mean and <s> embeddings, fill-mask logits and pipeline, classification
                                          logits and pipeline (pairs), token-classification logits, QA logits and
                                          answers (RoBERTa)

Texts are run through `AutoTokenizer.from_pretrained` of the saved folder, so the goldens follow what transformers
builds from the files (5.x rebuilds RoBERTa's and XLM-R's pipelines from the vocabulary in its own classes).
"""
import os
import shutil
import sys

import torch
from tokenizers import AddedToken, ByteLevelBPETokenizer
from transformers import (AutoTokenizer, RobertaConfig, RobertaForMaskedLM, RobertaForQuestionAnswering,
                          RobertaForSequenceClassification, RobertaForTokenClassification, RobertaTokenizer,
                          XLMRobertaConfig, XLMRobertaForMaskedLM, XLMRobertaForSequenceClassification,
                          XLMRobertaModel, XLMRobertaTokenizer)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402
import tokens as T  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "roberta.json")
USABLE = H.MAX_POSITIONS  # 64 positions for tokens
PAD = 1
VOCAB_SIZE = 600
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
FILL_MASK = [t.replace("[MASK]", "<mask>") for t in H.FILL_MASK_TINY] + ["Zürich is a <mask> in Switzerland."]
EMBED_TEXTS = H.EMBED_TEXTS_INTL
CLASSIFY_INPUTS = H.CLASSIFY_INPUTS_INTL
TOKEN_CASES = [c for c in T.CASES]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # no vocab.txt: the vocabulary is in tokenizer.json


def corpus():
    return H.tokenizer_corpus(FILL_MASK + EMBED_TEXTS + [x for d in CLASSIFY_INPUTS for x in d.values()], T.CASES,
                              "<mask>")


def roberta_tokenizer(d):
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus(), vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIALS)
    bpe.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)])
    os.makedirs(d, exist_ok=True)
    raw = os.path.join(d, "raw-tokenizer.json")
    bpe.save(raw)
    tok = RobertaTokenizer(tokenizer_file=raw, model_max_length=USABLE)
    tok.save_pretrained(d)
    os.remove(raw)
    return AutoTokenizer.from_pretrained(d)


def xlmr_tokenizer(d):
    vocab = H.unigram_vocab(corpus(), SPECIALS, VOCAB_SIZE) + [("<mask>", 0.0)]
    tok = XLMRobertaTokenizer(vocab=vocab, model_max_length=USABLE, clean_up_tokenization_spaces=True,
                              mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False,
                                                    special=True))
    shutil.rmtree(d, ignore_errors=True)
    tok.save_pretrained(d)
    return AutoTokenizer.from_pretrained(d)


def config(cls, vocab_size, **kw):
    return cls(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=USABLE + PAD + 1, type_vocab_size=1, initializer_range=0.3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=PAD, bos_token_id=0,
        eos_token_id=2, layer_norm_eps=1e-5, **kw)


def perturb(model, seed):
    """heads.perturb, for RoBERTa's `lm_head.layer_norm` too; the token-type row too (it is added to every
    token, so a model that skipped it would be caught)."""
    return H.perturb(model, seed, ("LayerNorm", "layer_norm", "token_type"))


def save(model, name, tok_dir):
    return H.save(model, name, tok_dir, TOKENIZER_FILES)


def token_goldens(tok):
    out = []
    for c in TOKEN_CASES:
        max_length = c.get("max_length", USABLE)
        pair = c.get("text_pair") or None
        e = tok(c["text"], pair, truncation=True, max_length=max_length, return_offsets_mapping=True)
        out.append({"name": c["name"], "text": c["text"], "text_pair": c.get("text_pair"), "max_length": max_length,
                    "input_ids": e["input_ids"], "offsets": [list(o) for o in e["offset_mapping"]],
                    "decoded": tok.decode(e["input_ids"]),
                    "decoded_skip": tok.decode(e["input_ids"], skip_special_tokens=True)})
    return out


class WithTypes:
    """heads.qa_reference reads `token_type_ids` from the encoding: all zeros, as the model would make them."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, *a, **kw):
        e = self.tok(*a, **kw)
        e["token_type_ids"] = torch.zeros_like(e["input_ids"])
        return e

    def __getattr__(self, k):
        return getattr(self.tok, k)


def main():
    ids3 = {0: "negative", 1: "neutral", 2: "positive"}
    ner_labels = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
    golden = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/roberta.rs"}

    # --- RoBERTa ----------------------------------------------------------------------------------------------------
    tok_dir = os.path.join(H.MODELS, "tiny-roberta-mlm")
    shutil.rmtree(tok_dir, ignore_errors=True)
    tok = roberta_tokenizer(tok_dir)
    V = len(tok)
    g = {"tokens": token_goldens(tok)}
    torch.manual_seed(21)
    m = perturb(RobertaForMaskedLM(config(RobertaConfig, V, architectures=["RobertaForMaskedLM"])), 121).eval()
    save(m, "tiny-roberta-mlm", tok_dir)
    g["embeddings"] = H.embeddings(m.roberta, tok, EMBED_TEXTS)
    g["fill_mask"] = H.fill_mask(m, tok, FILL_MASK)
    torch.manual_seed(22)
    m = perturb(RobertaForSequenceClassification(config(
        RobertaConfig, V, architectures=["RobertaForSequenceClassification"], id2label=ids3,
        label2id={v: k for k, v in ids3.items()})), 122).eval()
    save(m, "tiny-roberta-classifier", tok_dir)
    g["classifier"] = H.classify(m, tok, CLASSIFY_INPUTS)
    torch.manual_seed(23)
    m = perturb(RobertaForTokenClassification(config(
        RobertaConfig, V, architectures=["RobertaForTokenClassification"], id2label=ner_labels,
        label2id={v: k for k, v in ner_labels.items()})), 123).eval()
    save(m, "tiny-roberta-ner", tok_dir)
    g["ner"] = H.token_logits(m, tok)
    torch.manual_seed(24)
    m = perturb(RobertaForQuestionAnswering(config(RobertaConfig, V, architectures=["RobertaForQuestionAnswering"])),
                124).eval()
    save(m, "tiny-roberta-qa", tok_dir)
    g["qa"] = H.qa(H.WithoutTypes(m), WithTypes(tok))
    golden["roberta"] = g

    # --- XLM-RoBERTa ------------------------------------------------------------------------------------------------
    tok_dir = os.path.join(H.MODELS, "tiny-xlmr-mlm")
    tok = xlmr_tokenizer(tok_dir)
    V = len(tok)
    g = {"tokens": token_goldens(tok)}
    torch.manual_seed(31)
    m = perturb(XLMRobertaForMaskedLM(config(XLMRobertaConfig, V, architectures=["XLMRobertaForMaskedLM"],
                                             hidden_act="gelu_new")), 131).eval()
    save(m, "tiny-xlmr-mlm", tok_dir)
    g["fill_mask"] = H.fill_mask(m, tok, FILL_MASK)
    torch.manual_seed(32)
    m = perturb(XLMRobertaForSequenceClassification(config(
        XLMRobertaConfig, V, architectures=["XLMRobertaForSequenceClassification"], id2label=ids3,
        label2id={v: k for k, v in ids3.items()})), 132).eval()
    save(m, "tiny-xlmr-classifier", tok_dir)
    g["classifier"] = H.classify(m, tok, CLASSIFY_INPUTS)
    torch.manual_seed(33)
    m = perturb(XLMRobertaModel(config(XLMRobertaConfig, V, architectures=["XLMRobertaModel"])), 133).eval()
    save(m, "tiny-xlmr-model", tok_dir)
    g["embeddings"] = H.embeddings(m, tok, EMBED_TEXTS)
    golden["xlmr"] = g

    H.write_golden(OUT, golden)
    for fam in ("roberta", "xlmr"):
        g = golden[fam]
        print(fam, "fill-mask min top-k score gap", min(e["min_score_gap"] for e in g["fill_mask"]), file=sys.stderr)
        print(fam, "classifier min score gap", min(e["min_score_gap"] for e in g["classifier"]), file=sys.stderr)
        print(fam, "unk in embed texts", sum(e["input_ids"].count(3) for e in g["embeddings"]), file=sys.stderr)
    H.print_qa(golden["roberta"]["qa"])


if __name__ == "__main__":
    main()
