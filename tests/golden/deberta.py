#!/usr/bin/env python3
"""Goldens for DeBERTa-v2 / DeBERTa-v3 (`model_type: "deberta-v2"`), from PyTorch `transformers`
(`models/deberta_v2`).

Run from the repository root after electra_albert.py (it reuses its ALBERT tokenizer from tests/models/tiny-albert-mlm:
a SentencePiece Unigram model through tokenizer.json, `[CLS] A [SEP] B [SEP]` with token types 0 and 1, as
DeBERTa-v3's and mDeBERTa's tokenizers; and its helpers; needs torch, transformers 5.x, safetensors):

    /path/to/venv/bin/python tests/golden/deberta.py

The models are seeded random, hidden 32, 2 layers, 4 heads, feed-forward 64, 64 positions. DeBERTa-v3's shape:
`position_biased_input: false` (no absolute positions), `type_vocab_size: 0` (no token-type table), relative
attention with `position_buckets` 8 and `max_relative_positions` 16 (so that the texts, up to 60 tokens, cross the
exact buckets (|i - j| <= 4), the logarithmic ones, and the clamp at the table's ends), `norm_rel_ebd: "layer_norm"`,
`share_att_key: true`, `pos_att_type: ["p2c", "c2p"]`. The relative table `encoder.rel_embeddings` is scaled x4 after
the init so that a wrong bucket or a missing term moves the outputs far past the tolerances. Written to:
  tests/models/tiny-deberta-mlm/          DebertaV2ForMaskedLM, legacy: false (`lm_predictions.lm_head.*`, the decoder
                                          the word embeddings)
  tests/models/tiny-deberta-classifier/   DebertaV2ForSequenceClassification, 3 labels (ContextPooler `pooler.dense`
                                          + gelu, `classifier`), pairs included
  tests/models/tiny-deberta-ner/          DebertaV2ForTokenClassification
  tests/models/tiny-deberta-qa/           DebertaV2ForQuestionAnswering
  tests/models/tiny-deberta-model/        DebertaV2Model
  tests/models/tiny-deberta-abs/          DebertaV2Model in DeBERTa(-v2)'s older shape: absolute positions
                                          (`position_biased_input: true`), token types (type_vocab_size 2), no
                                          buckets (position_buckets -1, max_relative_positions -1: the span is
                                          max_position_embeddings), pos_att_type "c2p|p2c" as a string,
                                          norm_rel_ebd "none"
  tests/golden/deberta.json               mean and [CLS] embeddings of a padded batch (each model), fill-mask logits
                                          and pipeline, classification logits and pipeline, token-classification
                                          logits, QA logits and answers, transformers' bucket of every offset
                                          -300..300 for (8, 16) and for DeBERTa-v3-base's (256, 512), and how far
                                          the embeddings move without the relative terms
"""
import os
import sys

import torch
from transformers import (AutoTokenizer, DebertaV2Config, DebertaV2ForMaskedLM, DebertaV2ForQuestionAnswering,
                          DebertaV2ForSequenceClassification, DebertaV2ForTokenClassification, DebertaV2Model)
from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import electra_albert as E  # noqa: E402
import heads as H  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "deberta.json")
TOKENIZER = os.path.join(H.MODELS, "tiny-albert-mlm")
LONG = "the quick brown fox jumps over the lazy dog while the chef cooked the meal and the store was closed yesterday"
EMBED_TEXTS = E.EMBED_TEXTS + [LONG]


def config(vocab_size, **kw):
    base = dict(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=E.USABLE, type_vocab_size=0, initializer_range=0.3, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pooler_dropout=0.0, pad_token_id=0, layer_norm_eps=1e-7, hidden_act="gelu",
        relative_attention=True, position_buckets=8, max_relative_positions=16, norm_rel_ebd="layer_norm",
        share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False, pooler_hidden_act="gelu")
    base.update(kw)
    return DebertaV2Config(**base)


def perturb(model, seed):
    """electra_albert.perturb (biases and LayerNorms off their 0/1 init), and the relative table x4."""
    E.perturb(model, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "rel_embeddings" in name:
                p.mul_(4.0)
    return model


def save(model, name):
    return H.save(model, name, TOKENIZER, ("tokenizer.json", "tokenizer_config.json"))


def embeddings(encoder, tok):
    """heads.embeddings, checked against each text run alone."""
    enc, hidden = H.padded_hidden(encoder, tok, EMBED_TEXTS)
    assert enc["input_ids"].shape[1] <= E.USABLE, enc["input_ids"].shape
    rows = H.embedding_rows(EMBED_TEXTS, enc, hidden)
    # Each text alone gives the same real rows as in the padded batch (transformers' own check of its padding).
    for i, t in enumerate(EMBED_TEXTS):
        e = tok(t, return_tensors="pt")
        with torch.no_grad():
            alone = encoder(**e).last_hidden_state[0]
        n = alone.shape[0]
        assert torch.allclose(alone, hidden[i, :n], atol=1e-5), t
    return rows


def buckets(size, max_position):
    rel = torch.arange(-300, 301)
    return {"offsets": rel.tolist(), "size": size, "max_position": max_position,
            "buckets": make_log_bucket_position(rel, size, max_position).to(torch.long).tolist()}


def main():
    ids3 = {0: "negative", 1: "neutral", 2: "positive"}
    ner_labels = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
    tok = E.with_types(AutoTokenizer.from_pretrained(TOKENIZER))
    V = len(tok)
    g = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/deberta.rs",
         "buckets": [buckets(8, 16), buckets(256, 512)]}

    torch.manual_seed(61)
    m = perturb(DebertaV2ForMaskedLM(config(V, architectures=["DebertaV2ForMaskedLM"], legacy=False)), 161).eval()
    assert hasattr(m, "lm_predictions")
    save(m, "tiny-deberta-mlm")
    g["embeddings"] = embeddings(m.deberta, tok)
    g["fill_mask"] = H.fill_mask(m, tok, H.FILL_MASK_TINY + ["Zürich is a [MASK] in Switzerland."])
    torch.manual_seed(62)
    m = perturb(DebertaV2ForSequenceClassification(config(
        V, architectures=["DebertaV2ForSequenceClassification"], id2label=ids3,
        label2id={v: k for k, v in ids3.items()})), 162).eval()
    save(m, "tiny-deberta-classifier")
    g["classifier"] = E.classify(m, tok)
    torch.manual_seed(63)
    m = perturb(DebertaV2ForTokenClassification(config(
        V, architectures=["DebertaV2ForTokenClassification"], id2label=ner_labels,
        label2id={v: k for k, v in ner_labels.items()})), 163).eval()
    save(m, "tiny-deberta-ner")
    g["ner"] = H.token_logits(m, tok)
    torch.manual_seed(64)
    m = perturb(DebertaV2ForQuestionAnswering(config(V, architectures=["DebertaV2ForQuestionAnswering"])), 164).eval()
    save(m, "tiny-deberta-qa")
    g["qa"] = H.qa(m, tok)
    torch.manual_seed(65)
    m = perturb(DebertaV2Model(config(V, architectures=["DebertaV2Model"])), 165).eval()
    save(m, "tiny-deberta-model")
    g["model_embeddings"] = embeddings(m, tok)
    # Without the relative terms (the table zeroed, so both position projections are their biases only, and its
    # LayerNorm's beta): how far the outputs move; the tolerances are far below.
    with torch.no_grad():
        m.encoder.rel_embeddings.weight.zero_()
        m.encoder.LayerNorm.weight.zero_()
        m.encoder.LayerNorm.bias.zero_()
    without = embeddings(m, tok)
    g["without_relative_max_diff"] = max(abs(a - b) for x, y in zip(g["model_embeddings"], without)
                                         for a, b in zip(x["mean"], y["mean"]))
    torch.manual_seed(66)
    m = perturb(DebertaV2Model(config(
        V, architectures=["DebertaV2Model"], position_biased_input=True, type_vocab_size=2, position_buckets=-1,
        max_relative_positions=-1, pos_att_type="c2p|p2c", norm_rel_ebd="none")), 166).eval()
    assert m.encoder.rel_embeddings.weight.shape[0] == 2 * E.USABLE
    save(m, "tiny-deberta-abs")
    g["abs_embeddings"] = embeddings(m, tok)

    H.write_golden(OUT, g)
    print("fill-mask min top-k score gap", min(e["min_score_gap"] for e in g["fill_mask"]), file=sys.stderr)
    print("classifier min score gap", min(e["min_score_gap"] for e in g["classifier"]), file=sys.stderr)
    print("longest embed text", max(len(e["input_ids"]) for e in g["embeddings"]), "tokens", file=sys.stderr)
    print("without the relative terms the mean embeddings move by", g["without_relative_max_diff"], file=sys.stderr)


if __name__ == "__main__":
    main()
