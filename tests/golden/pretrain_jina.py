#!/usr/bin/env python3
"""Golden for continued pre-training (masked LM) of JinaBERT v2: tests/golden/pretrain_families.py's case (read its
docstring: the same three sentences and fixed masking, the float64 train-mode run of tests/golden/finetune_families.py
with every dropout 0, five AdamW steps with transformers' Trainer's parameter groups and clipping, the same recorded
fields) on tests/models/tiny-jina-mlm (JinaBertForMaskedLM: ALiBi over 6 heads, geglu `mlp.gated_layers`, BERT's
`cls.predictions` head with the decoder tied to the word embeddings), through tests/golden/jina.py's float64
transcription of the authors' code (transformers has no JinaBERT class). The loss is `JinaBertForMaskedLM`'s: mean
cross-entropy over the selected tokens (labels ≠ −100); the names are the checkpoint's.

Run from the repository root after jina.py (needs torch 2.x; transformers for the tokenizer only):

    /work/venv/bin/python tests/golden/pretrain_jina.py

It writes tests/golden/pretrain_jina.json with the case `jina`.
"""
import json
import os
import sys
from types import SimpleNamespace

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as ff  # noqa: E402
import jina as J  # noqa: E402
import pretrain_families as pf  # noqa: E402

OUT = os.path.join(ff.ROOT, "tests", "golden", "pretrain_jina.json")


class MaskedLM(J.JinaBertForMaskedLM):
    """The transcription's JinaBertForMaskedLM with its loss, as ff.run calls a transformers model."""

    def __init__(self, c):
        super().__init__(c)
        tied = c.get("tie_word_embeddings", True)
        self.config = SimpleNamespace(model_type=c["model_type"], tie_word_embeddings=tied)
        self.vocab = c["vocab_size"]

    def get_input_embeddings(self):
        return self.bert.embeddings.word_embeddings

    def forward(self, input_ids, attention_mask, token_type_ids, labels):
        logits = super().forward(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, self.vocab), labels.reshape(-1), ignore_index=-100)
        return SimpleNamespace(loss=loss, logits=logits)


def load(cls, name):
    """ff.load for the transcription: the checkpoint's tensors by its own names, float64, train mode."""
    d = os.path.join(ff.MODELS, name)
    with open(os.path.join(d, "config.json")) as fh:
        c = json.load(fh)
    assert c["hidden_dropout_prob"] == 0.0 and c["attention_probs_dropout_prob"] == 0.0
    model = cls(c)
    sd = load_file(os.path.join(d, "model.safetensors"))
    assert set(sd) == set(model.state_dict()), "the checkpoint's names are the module's"
    model.load_state_dict({k: v.to(J.DT) for k, v in sd.items()})
    return model.to(J.DT).train(), AutoTokenizer.from_pretrained(d)


def main():
    torch.set_num_threads(1)
    cases = {"jina": pf.case("jina", MaskedLM, "tiny-jina-mlm", True, loader=load)}
    assert any("gated_layers" in n for n in cases["jina"]["grads"])
    ff.write(OUT, cases)


if __name__ == "__main__":
    main()
