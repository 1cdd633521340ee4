#!/usr/bin/env python3
"""Golden for continued pre-training (masked LM) of DeBERTa-v2/v3 with its own head, `DebertaV2ForMaskedLM` as
transformers 5 builds it for `legacy: false` (DeBERTa-v3's released checkpoints): `lm_predictions.lm_head` (dense,
the config's `hidden_act`, LayerNorm, the decoder tied to the word embeddings, `lm_predictions.lm_head.bias`), as
tests/golden/pretrain_families.py does for BERT's other relatives (read its docstring: the same texts, the same
selection of masked, replaced and kept tokens, the same float64 run and five AdamW steps; this script reuses its
code).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/pretrain_deberta.py

It writes tests/golden/pretrain_deberta.json with one case, `deberta`, on tests/models/tiny-deberta-mlm (the
DeBERTa-v3-like configuration of tests/golden/finetune_deberta.py). DeBERTa-v3's own pre-training objective
(replaced-token detection with a generator) is not what `DebertaV2ForMaskedLM` computes; continued pre-training
here is the masked LM of that class, as transformers trains it.
"""
import os
import sys

import torch
from transformers import DebertaV2ForMaskedLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as ff  # noqa: E402
import pretrain_families as pf  # noqa: E402

OUT = os.path.join(ff.ROOT, "tests", "golden", "pretrain_deberta.json")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing here is random; fixed anyway
    cases = {"deberta": pf.case("deberta", DebertaV2ForMaskedLM, "tiny-deberta-mlm", False)}
    c = cases["deberta"]
    assert "deberta.encoder.rel_embeddings.weight" in c["grads"]
    assert "lm_predictions.lm_head.dense.weight" in c["grads"], sorted(c["grads"])
    ff.write(OUT, cases)


if __name__ == "__main__":
    main()
