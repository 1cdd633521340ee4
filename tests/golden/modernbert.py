#!/usr/bin/env python3
"""Goldens for ModernBERT, from PyTorch `transformers` (`models/modernbert`, transformers 5, its eager attention).

ModernBERT is pre-LN (`x + attn(attn_norm(x))`, `x + mlp(mlp_norm(x))`, no norm before layer 0's attention, a
`final_norm`), LayerNorms without β unless `norm_bias`, no position table and no token types, rotary positions with
a theta for the global layers (every `global_attn_every_n_layers`-th from layer 0) and one for the local layers,
which attend within |i − j| ≤ local_attention // 2; GeGLU from one `Wi` whose FIRST half is activated; biases only
where `attention_bias` / `mlp_bias` say; its heads read `head` (dense + `classifier_activation` + norm), then the
tied `decoder` (bias `decoder_bias`) or a `classifier` (the sequence classifier on the first token or the mean over
the mask, `classifier_pooling`). Run from the repository root after heads.py, roberta.py and rotary.py (it reuses
their helpers and inputs; needs torch, transformers 5.x, tokenizers, safetensors):

    /path/to/venv/bin/python tests/golden/modernbert.py

The tokenizer is a byte-level BPE as ModernBERT's own (OLMo's), trained here on the fortunes of tests/data and the
golden texts (vocabulary 500), with `[CLS] A [SEP] B [SEP]` (TemplateProcessing), `[MASK]` with lstrip, no token types, and
`clean_up_tokenization_spaces` as answerdotai/ModernBERT-base's tokenizer_config.json has them. The models are seeded
random, hidden 32, 4 layers (layers 0 and 3 global, 1 and 2 local: global_attn_every_n_layers 3), 4 heads (head dim
8), intermediate 32, 64 positions, windows of 8 or 4 keys (half 4 or 2) against texts of up to 48 tokens, global
theta 500 and local theta 100, written to:
  tests/models/tiny-modernbert-model/        ModernBertModel, no biases (the defaults), transformers 5's keys
                                             (`layer_types`, `rope_parameters`)
  tests/models/tiny-modernbert-mlm/          ModernBertForMaskedLM, every bias on, hidden_activation
                                             gelu_pytorch_tanh
  tests/models/tiny-modernbert-classifier/   ModernBertForSequenceClassification, `cls` pooling, no biases, 3 labels;
                                             its config.json in the hub's older keys (`global_attn_every_n_layers`,
                                             `global_rope_theta`, `local_rope_theta`), checked by loading it back
  tests/models/tiny-modernbert-mean/         ModernBertForSequenceClassification, `mean` pooling, every bias on,
                                             classifier_activation silu, a window of 4
  tests/models/tiny-modernbert-ner/          ModernBertForTokenClassification, no biases
  tests/models/tiny-modernbert-qa/           ModernBertForQuestionAnswering, every bias on
  tests/golden/modernbert.json               mean and [CLS] embeddings of a padded batch, fill-mask logits and
                                             pipeline, classification logits and pipeline (pairs), token logits, QA
                                             logits and answers; and how far the bare model's embeddings move with
                                             the window widened to every key (the tests' tolerances are far below)
"""
import json
import os
import sys

import torch
from tokenizers import AddedToken, ByteLevelBPETokenizer
from tokenizers.processors import TemplateProcessing
from transformers import (AutoTokenizer, ModernBertConfig, ModernBertForMaskedLM, ModernBertForQuestionAnswering,
                          ModernBertForSequenceClassification, ModernBertForTokenClassification, ModernBertModel,
                          PreTrainedTokenizerFast)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402
import roberta as R  # noqa: E402
import rotary as RT  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "modernbert.json")
TOKENIZER = os.path.join(H.MODELS, "tiny-modernbert-model")
VOCAB_SIZE = 500
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]"]
IDS3 = RT.IDS3
NER_LABELS = RT.NER_LABELS
WIDE = 1000  # a window that holds every key of the goldens' texts
# rotary.py's texts, its long one cut to fit 64 positions in this smaller byte-level vocabulary.
EMBED_TEXTS = RT.EMBED_TEXTS[:-1] + [H.QA_INPUTS[2]["context"][:110]]


def tokenizer(d):
    bpe = ByteLevelBPETokenizer()
    corpus = [t.replace("[MASK]", "") for t in R.corpus() + H.FILL_MASK_TINY]
    bpe.train_from_iterator(corpus, vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIALS)
    bpe.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)])
    cls, sep = bpe.token_to_id("[CLS]"), bpe.token_to_id("[SEP]")
    bpe.post_processor = TemplateProcessing(single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                            special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, cls_token="[CLS]", sep_token="[SEP]",
                                  pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]",
                                  model_max_length=H.MAX_POSITIONS, clean_up_tokenization_spaces=True,
                                  model_input_names=["input_ids", "attention_mask"])
    os.makedirs(d, exist_ok=True)
    tok.save_pretrained(d)
    return AutoTokenizer.from_pretrained(d)


def config(tok, biases=False, local_attention=8, **kw):
    return ModernBertConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        max_position_embeddings=H.MAX_POSITIONS, initializer_range=0.3, norm_eps=1e-5,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
        cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id, global_attn_every_n_layers=3,
        local_attention=local_attention, global_rope_theta=500.0, local_rope_theta=100.0,
        attention_bias=biases, mlp_bias=biases, norm_bias=biases, classifier_bias=biases, decoder_bias=biases,
        attn_implementation="eager", **kw)


def perturb(model, seed):
    """heads.perturb for every norm (`*_norm`, `norm`), so that a bias or norm dropped (or a β read where there is
    none) changes the outputs."""
    return H.perturb(model, seed, ("norm",))


def save(model, name):
    return R.save(model, name, TOKENIZER)


def hub_keys(d, model):
    """The classifier's config.json in the hub's older keys (as answerdotai/ModernBERT-base's): the layer pattern as
    `global_attn_every_n_layers`, the thetas as `global_rope_theta` / `local_rope_theta`; checked to load back into
    the same model."""
    path = os.path.join(d, "config.json")
    with open(path) as fh:
        c = json.load(fh)
    for k in ("layer_types", "rope_parameters"):
        c.pop(k, None)
    c.update(global_attn_every_n_layers=3, global_rope_theta=500.0, local_rope_theta=100.0,
             position_embedding_type="absolute", reference_compile=True)
    with open(path, "w") as fh:
        json.dump(c, fh, indent=2)
    back = ModernBertForSequenceClassification.from_pretrained(d, attn_implementation="eager").eval()
    assert back.config.layer_types == model.config.layer_types, back.config.layer_types
    assert back.config.rope_parameters == model.config.rope_parameters, back.config.rope_parameters


def wide_window(encoder, tok, want):
    """How far the mean embeddings move when the local layers see every key (their theta kept): the tests widen the
    window the same way and expect the same move."""
    narrow = encoder.config.local_attention
    encoder.config.local_attention = 2 * WIDE
    got = H.embeddings(encoder, tok, EMBED_TEXTS)
    encoder.config.local_attention = narrow
    return max(abs(a - b) for x, y in zip(want, got) for a, b in zip(x["mean"], y["mean"]))


def main():
    tok = tokenizer(TOKENIZER)
    longest = max(len(tok(t)["input_ids"]) for t in EMBED_TEXTS)
    assert 8 < longest <= H.MAX_POSITIONS, longest
    g = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/modernbert.rs"}

    torch.manual_seed(71)
    m = perturb(ModernBertModel(config(tok, architectures=["ModernBertModel"])), 171).eval()
    assert m.config.layer_types == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    save(m, "tiny-modernbert-model")
    g["model_embeddings"] = H.embeddings(m, tok, EMBED_TEXTS)
    g["wide_window_max_diff"] = wide_window(m, tok, g["model_embeddings"])

    torch.manual_seed(72)
    m = perturb(ModernBertForMaskedLM(config(tok, biases=True, hidden_activation="gelu_pytorch_tanh",
                                             architectures=["ModernBertForMaskedLM"])), 172).eval()
    save(m, "tiny-modernbert-mlm")
    g["embeddings"] = H.embeddings(m.model, tok, EMBED_TEXTS)
    g["fill_mask"] = H.fill_mask(m, tok, RT.FILL_MASK)

    torch.manual_seed(73)
    m = perturb(ModernBertForSequenceClassification(config(
        tok, architectures=["ModernBertForSequenceClassification"], classifier_pooling="cls", id2label=IDS3,
        label2id={v: k for k, v in IDS3.items()})), 173).eval()
    hub_keys(save(m, "tiny-modernbert-classifier"), m)
    g["classifier"] = H.classify(m, tok, R.CLASSIFY_INPUTS)

    torch.manual_seed(74)
    m = perturb(ModernBertForSequenceClassification(config(
        tok, biases=True, local_attention=4, classifier_activation="silu", classifier_pooling="mean",
        architectures=["ModernBertForSequenceClassification"], id2label=IDS3,
        label2id={v: k for k, v in IDS3.items()})), 174).eval()
    save(m, "tiny-modernbert-mean")
    g["classifier_mean"] = H.classify(m, tok, R.CLASSIFY_INPUTS)

    torch.manual_seed(75)
    m = perturb(ModernBertForTokenClassification(config(
        tok, architectures=["ModernBertForTokenClassification"], id2label=NER_LABELS,
        label2id={v: k for k, v in NER_LABELS.items()})), 175).eval()
    save(m, "tiny-modernbert-ner")
    g["ner"] = H.token_logits(m, tok)

    torch.manual_seed(76)
    m = perturb(ModernBertForQuestionAnswering(config(tok, biases=True,
                                                      architectures=["ModernBertForQuestionAnswering"])), 176).eval()
    save(m, "tiny-modernbert-qa")
    g["qa"] = H.qa(H.WithoutTypes(m), R.WithTypes(tok))

    H.write_golden(OUT, g)
    print("fill-mask min top-k score gap", min(e["min_score_gap"] for e in g["fill_mask"]), file=sys.stderr)
    for k in ("classifier", "classifier_mean"):
        print(k, "min score gap", min(e["min_score_gap"] for e in g[k]), file=sys.stderr)
    print("longest embed text", longest, "tokens", file=sys.stderr)
    print("with the window wide the mean embeddings move by", g["wide_window_max_diff"], file=sys.stderr)
    for name in ("tiny-modernbert-model", "tiny-modernbert-mlm"):
        with open(os.path.join(H.MODELS, name, "model.safetensors"), "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            print(name, "tensors:", sorted(json.loads(fh.read(n))), file=sys.stderr)


if __name__ == "__main__":
    main()
