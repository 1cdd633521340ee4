#!/usr/bin/env python3
"""Goldens for MPNet, from PyTorch `transformers` (`models/mpnet`).

Run from the repository root after roberta.py (it reuses roberta.py's byte-level BPE tokenizer from
tests/models/tiny-roberta-mlm, whose `<s> <pad> </s> <unk>` ids 0..3 and `<s> A </s></s> B </s>` pairs are MPNet's,
and its helpers; needs torch, transformers 5.x, safetensors):

    /path/to/venv/bin/python tests/golden/mpnet.py

The models are seeded random, hidden 32, 2 layers, 4 heads, feed-forward 64, `pad_token_id` 1,
`max_position_embeddings` 66 (64 usable positions: MPNet's, as RoBERTa's, start at padding_idx + 1), 32 relative
position buckets whose table is scaled ×4 after the init (so that a wrong bucket or a missing bias moves the outputs
far past the tolerances), written to:
  tests/models/tiny-mpnet-mlm/          MPNetForMaskedLM
  tests/models/tiny-mpnet-classifier/   MPNetForSequenceClassification, 3 labels (pairs included)
  tests/models/tiny-mpnet-model/        MPNetModel with its pooler, as all-mpnet-base-v2 ships (at the root)
  tests/models/tiny-mpnet-ner/          MPNetForTokenClassification
  tests/models/tiny-mpnet-qa/           MPNetForQuestionAnswering
  tests/golden/mpnet.json               mean and <s> embeddings of a padded batch (texts of 3 to 40 tokens: offsets
                                        in the exact and the logarithmic buckets), fill-mask logits and pipeline,
                                        classification logits and pipeline, token-classification logits, QA logits
                                        and answers, and transformers' bucket of every offset -300..300
"""
import json
import os
import sys

import torch
from transformers import (AutoTokenizer, MPNetConfig, MPNetForMaskedLM, MPNetForQuestionAnswering,
                          MPNetForSequenceClassification, MPNetForTokenClassification, MPNetModel)
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402
import roberta as R  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "mpnet.json")
TOKENIZER = os.path.join(H.MODELS, "tiny-roberta-mlm")


def config(vocab_size, **kw):
    return MPNetConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=R.USABLE + R.PAD + 1, initializer_range=0.3, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=R.PAD, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5,
        relative_attention_num_buckets=32, **kw)


def perturb(model, seed):
    """roberta.perturb, and the relative bias ×4."""
    R.perturb(model, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_attention_bias" in name:
                p.mul_(4.0)
    return model


def save(model, name):
    return R.save(model, name, TOKENIZER)


def main():
    ids3 = {0: "negative", 1: "neutral", 2: "positive"}
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    V = len(tok)
    g = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/mpnet.rs"}
    rel = torch.arange(-300, 301)
    g["buckets"] = {"offsets": rel.tolist(), "buckets": MPNetEncoder.relative_position_bucket(rel).tolist()}

    torch.manual_seed(41)
    m = perturb(MPNetForMaskedLM(config(V, architectures=["MPNetForMaskedLM"])), 141).eval()
    save(m, "tiny-mpnet-mlm")
    g["embeddings"] = H.embeddings(m.mpnet, tok, R.EMBED_TEXTS)
    g["fill_mask"] = H.fill_mask(m, tok, R.FILL_MASK)
    torch.manual_seed(42)
    m = perturb(MPNetForSequenceClassification(config(
        V, architectures=["MPNetForSequenceClassification"], id2label=ids3,
        label2id={v: k for k, v in ids3.items()})), 142).eval()
    save(m, "tiny-mpnet-classifier")
    g["classifier"] = H.classify(m, tok, R.CLASSIFY_INPUTS)
    ner_labels = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
    torch.manual_seed(44)
    m = perturb(MPNetForTokenClassification(config(
        V, architectures=["MPNetForTokenClassification"], id2label=ner_labels,
        label2id={v: k for k, v in ner_labels.items()})), 144).eval()
    save(m, "tiny-mpnet-ner")
    g["ner"] = H.token_logits(m, tok)
    torch.manual_seed(45)
    m = perturb(MPNetForQuestionAnswering(config(V, architectures=["MPNetForQuestionAnswering"])), 145).eval()
    save(m, "tiny-mpnet-qa")
    g["qa"] = H.qa(H.WithoutTypes(m), R.WithTypes(tok))
    torch.manual_seed(43)
    m = perturb(MPNetModel(config(V, architectures=["MPNetModel"])), 143).eval()
    d = save(m, "tiny-mpnet-model")
    g["model_embeddings"] = H.embeddings(m, tok, R.EMBED_TEXTS)
    # The same model without its bias: how far a missing bias moves the outputs (the tests' tolerances are far below).
    with torch.no_grad():
        m.encoder.relative_attention_bias.weight.zero_()
    without = H.embeddings(m, tok, R.EMBED_TEXTS)
    g["without_bias_max_diff"] = max(abs(a - b) for x, y in zip(g["model_embeddings"], without)
                                     for a, b in zip(x["mean"], y["mean"]))

    H.write_golden(OUT, g)
    print("fill-mask min top-k score gap", min(e["min_score_gap"] for e in g["fill_mask"]), file=sys.stderr)
    print("classifier min score gap", min(e["min_score_gap"] for e in g["classifier"]), file=sys.stderr)
    print("longest embed text", max(len(e["input_ids"]) for e in g["embeddings"]), "tokens", file=sys.stderr)
    print("without the bias the mean embeddings move by", g["without_bias_max_diff"], file=sys.stderr)
    with open(os.path.join(d, "model.safetensors"), "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        print("tiny-mpnet-model tensors:", sorted(json.loads(fh.read(n)))[:6], "...", file=sys.stderr)


if __name__ == "__main__":
    main()
