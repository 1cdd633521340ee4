#!/usr/bin/env python3
"""Golden for full-encoder fine-tuning of ModernBERT: tests/golden/finetune_families.py's run (read its docstring:
the same batches, the same float64 train-mode run with every dropout 0, the same five AdamW steps with transformers'
Trainer's parameter groups and clipping, the same recorded fields), on the tiny ModernBERT checkpoints
tests/golden/modernbert.py made, with transformers 5's own classes (`models/modernbert`, eager attention).

The checkpoints: hidden 32, 4 layers, layers 0 and 3 global and 1 and 2 local (`global_attn_every_n_layers` 3),
a local window smaller than every batch's padded length (`local_attention` 8: |i − j| ≤ 4; 4 in tiny-modernbert-mean:
|i − j| ≤ 2), so the window's mask changes the local layers; every batch padded. ModernBERT has no token types: a
pair is `[CLS] A [SEP] B [SEP]`, told apart by its separators.

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/finetune_modernbert.py

It writes tests/golden/finetune_modernbert.json:

  modern_classify  tiny-modernbert-classifier  ModernBertForSequenceClassification (`classifier_pooling: cls`;
                                               no biases, LayerNorms without β, `head` + `classifier`)
  modern_pair      tiny-modernbert-classifier  the same on text pairs
  modern_mean      tiny-modernbert-mean        the same with `classifier_pooling: mean`, every bias (`Wi`'s
                                               included), LayerNorms with β, SiLU in `head`
  modern_ner       tiny-modernbert-ner         ModernBertForTokenClassification
  modern_qa        tiny-modernbert-qa          ModernBertForQuestionAnswering (`head`, then `classifier` (2, H) as the
                                               span head), tests/golden/finetune_families.py's QA pairs; the
                                               shortest is padded past its window, so some padded queries' windows
                                               hold no real key

and under `embeddings`, embedding training as tests/golden/finetune_rotary.py has it (MultipleNegativesRankingLoss on
mean-pooled, normalised vectors of the final norm's output, scale 20, 4 pairs):

  modern           tiny-modernbert-model       ModernBertModel

transformers' parameter names are the checkpoints' (`model.layers.{i}.attn.Wqkv`, `…mlp.Wi` `[input; gate]`, ...).
Gradients of the zero set are those below 1e-10 of the global norm (the padding token's embedding row).

transformers' `eager_attention_forward` takes its softmax in float32 (`dtype=torch.float32`) whatever the model's
dtype: in a float64 model the mask's float64 minimum becomes −inf there, and a padded query whose window holds no
real key gets a row of NaN that reaches every gradient. This golden is float64 throughout: the same function with its
softmax in the model's dtype (`float64_softmax`), so the fully masked rows stay finite: every score of such a row is
`s + finfo.min`, which rounds to `finfo.min`, so its softmax is uniform over all T keys, padding included (as it is in
float32 with transformers' own float32 softmax), and autograd's gradient of its scores is the softmax's at that
uniform P. Nothing real reads those rows, but the QA loss reads every position's logit.
"""
import os
import sys

import torch
from transformers import (
    AutoConfig,
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    ModernBertModel,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as F  # noqa: E402
import finetune_rotary as R  # noqa: E402
import transformers.models.modernbert.modeling_modernbert as M  # noqa: E402

OUT = os.path.join(F.ROOT, "tests", "golden", "finetune_modernbert.json")


def float64_softmax(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager_attention_forward with its softmax in the inputs' dtype."""
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.nn.functional.softmax(w, dim=-1)
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def windowed(case, c, name):
    """The window must be narrower than the batch: some real key of some query is outside it."""
    cfg = AutoConfig.from_pretrained(os.path.join(F.MODELS, name))
    half = cfg.local_attention // 2
    longest = max(sum(r) for r in c["attention_mask"])
    assert longest > half + 1, f"{case}: {longest} tokens, a window of ±{half} covers them all"
    assert cfg.layer_types.count("sliding_attention") >= 1 and cfg.layer_types.count("full_attention") >= 2
    assert min(sum(r) for r in c["attention_mask"]) < len(c["attention_mask"][0]), f"{case}: no padding"


def windowless(case, c, name):
    """Some padded query's window holds no real key: its row is all `finfo.min`, uniform over every key, and the QA
    loss reads its logits."""
    half = AutoConfig.from_pretrained(os.path.join(F.MODELS, name)).local_attention // 2
    rows = [r for r in c["attention_mask"] if any(r[i] == 0 and not any(r[max(0, i - half):i + half + 1])
                                                   for i in range(len(r)))]
    assert rows, f"{case}: every padded query has a real key in its window"


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    M.eager_attention_forward = float64_softmax
    cases = {
        "modern_classify": F.classify_case("modern_classify", ModernBertForSequenceClassification,
                                           "tiny-modernbert-classifier", False),
        # No token types: a pair is `[CLS] A [SEP] B [SEP]`.
        "modern_pair": F.classify_case("modern_pair", ModernBertForSequenceClassification, "tiny-modernbert-classifier",
                                       False, pairs=True, seps=2),
        "modern_mean": F.classify_case("modern_mean", ModernBertForSequenceClassification, "tiny-modernbert-mean",
                                       False),
        "modern_ner": F.ner_case("modern_ner", ModernBertForTokenClassification, "tiny-modernbert-ner", False),
        "modern_qa": F.qa_case("modern_qa", ModernBertForQuestionAnswering, "tiny-modernbert-qa"),
    }
    for name, c in cases.items():
        windowed(name, c, c["model"])
    windowless("modern_qa", cases["modern_qa"], "tiny-modernbert-qa")
    embeddings = {"modern": R.embed_case(ModernBertModel, "tiny-modernbert-model")}
    F.write(OUT, cases, embeddings)


if __name__ == "__main__":
    main()
