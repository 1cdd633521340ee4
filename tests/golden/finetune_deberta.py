#!/usr/bin/env python3
"""Golden for fine-tuning DeBERTa-v2/v3's whole encoder: gradients of every parameter and five AdamW steps, from
PyTorch `transformers` in float64, as tests/golden/finetune_families.py does for BERT's other relatives (read its
docstring: the same batches, the same train-mode run with every dropout 0, the same AdamW steps with transformers'
Trainer's parameter groups and clipping, the same recorded fields; this script reuses its code).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/finetune_deberta.py

It writes tests/golden/finetune_deberta.json with one case per task, each on a committed tiny DeBERTa-v3-like
checkpoint (2 layers, `relative_attention`, `position_buckets` 8, `max_relative_positions` 16, `pos_att_type`
p2c and c2p, `share_att_key`, `norm_rel_ebd: layer_norm`, `position_biased_input: false`, no token types) loaded
with DeBERTa's own class and tokenized by its own tokenizer:

  deberta_classify  tiny-deberta-classifier  DebertaV2ForSequenceClassification (ContextPooler on [CLS]: dense, exact
                    GELU; then `classifier`)
  deberta_pair      tiny-deberta-classifier  the same on text pairs (no token types: `type_vocab_size` 0)
  deberta_ner       tiny-deberta-ner         DebertaV2ForTokenClassification
  deberta_qa        tiny-deberta-qa          DebertaV2ForQuestionAnswering (`qa_outputs` on every token) on
                    tests/golden/finetune_families.py's QA pairs, padded: its loss softmaxes over all T positions,
                    so the padded positions' logits count. DeBERTa masks a padded query's scores too (the outer
                    product of the padding mask, `masked_fill` by `finfo.min`): its probabilities are 1/T over every
                    key and its scores get no gradient; and its embeddings are zeroed (`embeddings * mask`)

The batches are longer than the buckets' exact span (|i − j| > 4 falls in the logarithmic buckets), with padding.
What DeBERTa adds to the encoder is the relative table `deberta.encoder.rel_embeddings.weight` (2·8 rows) and its
LayerNorm `deberta.encoder.LayerNorm`, read by every layer's attention through that layer's own query and key
projections: their gradients here are autograd's sums over the layers; transformers' Trainer decays the table (an
`nn.Embedding` weight), not its LayerNorm.

One step of transformers' own is not float64: `DebertaV2ForSequenceClassification` casts the logits to float32 for
its cross-entropy (`.float()`), so the sequence cases' losses carry float32 rounding (about 1e-7 relative) and their
gradients enter the float64 backward from a float32 softmax; both are far below the Rust test's bounds (2e-5).
"""
import os
import sys

import torch
from transformers import DebertaV2ForQuestionAnswering, DebertaV2ForSequenceClassification, DebertaV2ForTokenClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as ff  # noqa: E402

OUT = os.path.join(ff.ROOT, "tests", "golden", "finetune_deberta.json")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing here is random; fixed anyway
    cases = {
        "deberta_classify": ff.classify_case("deberta_classify", DebertaV2ForSequenceClassification,
                                             "tiny-deberta-classifier", False),
        "deberta_pair": ff.classify_case("deberta_pair", DebertaV2ForSequenceClassification,
                                         "tiny-deberta-classifier", False, pairs=True),
        "deberta_ner": ff.ner_case("deberta_ner", DebertaV2ForTokenClassification, "tiny-deberta-ner", False),
        "deberta_qa": ff.qa_case("deberta_qa", DebertaV2ForQuestionAnswering, "tiny-deberta-qa"),
    }
    for name, c in cases.items():
        rel = [n for n in c["grads"] if "rel_embeddings" in n]
        assert len(rel) == 1 and rel[0] not in c["no_decay"], f"{name}: the relative table {rel}"
        assert "deberta.encoder.LayerNorm.weight" in c["no_decay"], name
        assert len(c["input_ids"][0]) > 8, f"{name}: the batch reaches the logarithmic buckets"
    ff.write(OUT, cases)


if __name__ == "__main__":
    main()
