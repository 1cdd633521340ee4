#!/usr/bin/env python3
"""Golden for continued pre-training (masked LM) of ModernBERT: tests/golden/pretrain_families.py's case (the same
texts, the same fixed masking, the same float64 run and five AdamW steps; read its docstring) on the tiny
ModernBertForMaskedLM tests/golden/modernbert.py made (4 layers, layers 1 and 2 local with a window of ±4 tokens,
narrower than the batch; the batch padded; every bias, `Wi`'s included, and LayerNorms with β; GELU-tanh in the
layers), with transformers 5's own class. Its head: `head.dense` (with its bias, `classifier_bias`),
`classifier_activation`, `head.norm`, and the decoder tied to `model.embeddings.tok_embeddings` plus `decoder.bias`.

Two float32 steps of transformers are taken in float64 here, so that the golden is float64 throughout: the
attention's softmax (tests/golden/finetune_modernbert.py says why) and the loss (`ForMaskedLMLoss` casts the logits
to float32 first; `float64_loss` is the same cross-entropy, mean over the labelled tokens, on the float64 logits).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/pretrain_modernbert.py

It writes tests/golden/pretrain_modernbert.json with the one case `modern`.
"""
import os
import sys

import torch
from transformers import ModernBertForMaskedLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as F  # noqa: E402
import finetune_modernbert as FM  # noqa: E402
import pretrain_families as P  # noqa: E402
import transformers.models.modernbert.modeling_modernbert as M  # noqa: E402

from transformers.loss.loss_utils import LOSS_MAPPING  # noqa: E402

OUT = os.path.join(F.ROOT, "tests", "golden", "pretrain_modernbert.json")


def float64_loss(logits, labels, vocab_size, ignore_index=-100, **kwargs):
    """transformers' ForMaskedLMLoss without its cast to float32."""
    return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab_size), labels.reshape(-1).to(logits.device),
                                             ignore_index=ignore_index)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    M.eager_attention_forward = FM.float64_softmax
    LOSS_MAPPING["ForMaskedLM"] = float64_loss
    cases = {"modern": P.case("modern", ModernBertForMaskedLM, "tiny-modernbert-mlm", False)}
    for name, c in cases.items():
        FM.windowed(name, c, c["model"])
    F.write(OUT, cases)


if __name__ == "__main__":
    main()
