#!/usr/bin/env python3
"""Goldens for DistilBERT, the BERT family's first relative that bertgpu runs, from PyTorch `transformers`.

Run from the repository root after heads.py (it reuses heads.py's inputs, tiny WordPiece vocabulary and reference
QA decoding; needs torch, transformers 5.x, safetensors):

    /path/to/venv/bin/python tests/golden/distilbert.py

It writes, all seeded random with hidden 32, 2 layers, 4 heads, feed-forward 64 (`DistilBertConfig` names: dim,
n_layers, n_heads, hidden_dim), learned positions (`sinusoidal_pos_embds: false`):
  tests/models/tiny-distilbert-mlm/         DistilBertForMaskedLM (its decoder tied to the word embeddings)
  tests/models/tiny-distilbert-classifier/  DistilBertForSequenceClassification, 3 labels (pre_classifier + ReLU)
  tests/models/tiny-distilbert-ner/         DistilBertForTokenClassification
  tests/models/tiny-distilbert-qa/          DistilBertForQuestionAnswering (64 positions: long contexts need windows)
  tests/golden/distilbert.json              mean-pooled embeddings, fill-mask logits and pipeline, classification
                                            logits and pipeline (pairs included: DistilBERT has no token types),
                                            token-classification logits, QA logits and answers

DistilBERT's forward takes no token_type_ids: the tokenizers here are told so (model_input_names), and the QA
reference (which reads them from its tokenizer) calls the model without them.
"""
import os
import sys

import torch
from transformers import (AutoTokenizer, DistilBertConfig, DistilBertForMaskedLM, DistilBertForQuestionAnswering,
                          DistilBertForSequenceClassification, DistilBertForTokenClassification)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "distilbert.json")
EMBED_TEXTS = [c["text"] for c in H.CLASSIFY_INPUTS] + H.NER_TEXTS


def config(vocab_size, **kw):
    return DistilBertConfig(
        vocab_size=vocab_size, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=H.MAX_POSITIONS,
        activation="gelu", dropout=0.0, attention_dropout=0.0, qa_dropout=0.0, seq_classif_dropout=0.0,
        initializer_range=0.3, pad_token_id=0, sinusoidal_pos_embds=False, **kw)


def perturb(model, seed):
    """heads.perturb, for DistilBERT's LayerNorm names (sa_layer_norm, output_layer_norm, vocab_layer_norm)."""
    return H.perturb(model, seed, ("LayerNorm", "layer_norm"))


def tokenizer(d):
    tok = AutoTokenizer.from_pretrained(d)
    tok.model_input_names = ["input_ids", "attention_mask"]
    return tok


def main():
    tok_dir = os.path.join(H.MODELS, "tiny-distilbert-mlm")
    vocab = H.build_vocab(tok_dir)
    V = len(vocab)
    tok = tokenizer(tok_dir)
    golden = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/distilbert.rs"}

    # --- masked LM, and the encoder's mean-pooled embeddings ------------------------------------------------------
    torch.manual_seed(11)
    m = perturb(DistilBertForMaskedLM(config(V, architectures=["DistilBertForMaskedLM"])), 111).eval()
    H.save(m, "tiny-distilbert-mlm", tok_dir)
    golden["embeddings"] = H.embeddings(m.distilbert, tok, EMBED_TEXTS, with_ids=False)
    golden["fill_mask"] = H.fill_mask(m, tok, H.FILL_MASK_TINY)

    # --- sequence classification (single texts and pairs) --------------------------------------------------------
    id2label = {0: "negative", 1: "neutral", 2: "positive"}
    torch.manual_seed(12)
    m = perturb(DistilBertForSequenceClassification(config(
        V, architectures=["DistilBertForSequenceClassification"], id2label=id2label,
        label2id={v: k for k, v in id2label.items()})), 112).eval()
    H.save(m, "tiny-distilbert-classifier", tok_dir)
    golden["classifier"] = H.classify(m, tok)

    # --- token classification ------------------------------------------------------------------------------------
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    id2label = dict(enumerate(labels))
    torch.manual_seed(13)
    m = perturb(DistilBertForTokenClassification(config(
        V, architectures=["DistilBertForTokenClassification"], id2label=id2label,
        label2id={v: k for k, v in id2label.items()})), 113).eval()
    H.save(m, "tiny-distilbert-ner", tok_dir)
    golden["ner"] = H.token_logits(m, tok)

    # --- question answering --------------------------------------------------------------------------------------
    torch.manual_seed(14)
    m = perturb(DistilBertForQuestionAnswering(config(V, architectures=["DistilBertForQuestionAnswering"])), 114).eval()
    H.save(m, "tiny-distilbert-qa", tok_dir)
    # qa_reference reads the token types from the tokenizer (then WithoutTypes drops them), so the default one.
    golden["qa"] = H.qa(H.WithoutTypes(m), AutoTokenizer.from_pretrained(tok_dir))

    H.write_golden(OUT, golden)
    print("fill-mask min top-k score gap", min(e["min_score_gap"] for e in golden["fill_mask"]), file=sys.stderr)
    print("classifier min score gap", min(e["min_score_gap"] for e in golden["classifier"]), file=sys.stderr)
    H.print_qa(golden["qa"])


if __name__ == "__main__":
    main()
