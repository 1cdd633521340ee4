#!/usr/bin/env python3
"""Golden for fine-tuning MPNet's whole encoder: gradients of every parameter and five AdamW steps, from PyTorch
`transformers` in float64, as tests/golden/finetune_families.py does for BERT's other relatives (read its docstring:
the same batches, the same train-mode run with every dropout 0, the same AdamW steps with transformers' Trainer's
parameter groups and clipping, the same recorded fields; this script reuses its code).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/finetune_mpnet.py

It writes tests/golden/finetune_mpnet.json with one case per task, each on a committed tiny checkpoint loaded with
MPNet's own class and tokenized by its own tokenizer:

  mpnet_classify  tiny-mpnet-classifier  MPNetForSequenceClassification (MPNetClassificationHead on <s>: dense,
                  tanh, out_proj; positions from padding_idx + 1; no token types)
  mpnet_pair      tiny-mpnet-classifier  the same on text pairs
  mpnet_ner       tiny-mpnet-ner         MPNetForTokenClassification
  mpnet_qa        tiny-mpnet-qa          MPNetForQuestionAnswering (finetune_families.py's QA pairs; padding tokens
                  read position row padding_idx, which with the word table's gets no gradient)

What MPNet adds to the encoder is the relative position bias, `mpnet.encoder.relative_attention_bias.weight` (32
buckets × heads), one table that every layer's attention adds to its scores: its gradient here is autograd's sum
over the layers, and transformers' Trainer decays it (an `nn.Embedding` weight).
"""
import os
import sys

import torch
from transformers import MPNetForQuestionAnswering, MPNetForSequenceClassification, MPNetForTokenClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as ff  # noqa: E402

OUT = os.path.join(ff.ROOT, "tests", "golden", "finetune_mpnet.json")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing here is random; fixed anyway
    cases = {
        "mpnet_classify": ff.classify_case("mpnet_classify", MPNetForSequenceClassification, "tiny-mpnet-classifier",
                                           False),
        # No token types: a pair is `<s> a </s></s> b </s>`, and nothing else tells the sides apart.
        "mpnet_pair": ff.classify_case("mpnet_pair", MPNetForSequenceClassification, "tiny-mpnet-classifier", False,
                                       pairs=True, seps=3),
        "mpnet_ner": ff.ner_case("mpnet_ner", MPNetForTokenClassification, "tiny-mpnet-ner", False),
        "mpnet_qa": ff.qa_case("mpnet_qa", MPNetForQuestionAnswering, "tiny-mpnet-qa"),
    }
    for name, c in cases.items():
        rel = [n for n in c["grads"] if "relative_attention_bias" in n]
        assert len(rel) == 1 and rel[0] not in c["no_decay"], f"{name}: the relative bias table {rel}"
    ff.write(OUT, cases)


if __name__ == "__main__":
    main()
