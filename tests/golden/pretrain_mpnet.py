#!/usr/bin/env python3
"""Golden for continued pre-training (masked LM) of MPNet with its own head, `MPNetForMaskedLM`'s `lm_head`
(lm_head.dense, the exact GELU, lm_head.layer_norm, the decoder tied to the word embeddings, lm_head.bias), as
tests/golden/pretrain_families.py does for BERT's other relatives (read its docstring: the same texts, the same
selection of masked, replaced and kept tokens, the same float64 run and five AdamW steps; this script reuses its
code).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/pretrain_mpnet.py

It writes tests/golden/pretrain_mpnet.json with one case, `mpnet`, on tests/models/tiny-mpnet-mlm. MPNet's own
pre-training objective (permuted language modelling with its two streams) is not what `MPNetForMaskedLM` computes;
continued pre-training of an MPNet checkpoint is the masked LM of that class, as transformers trains it.
"""
import os
import sys

import torch
from transformers import MPNetForMaskedLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as ff  # noqa: E402
import pretrain_families as pf  # noqa: E402

OUT = os.path.join(ff.ROOT, "tests", "golden", "pretrain_mpnet.json")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing here is random; fixed anyway
    cases = {"mpnet": pf.case("mpnet", MPNetForMaskedLM, "tiny-mpnet-mlm", False)}
    c = cases["mpnet"]
    assert "mpnet.encoder.relative_attention_bias.weight" in c["grads"]
    ff.write(OUT, cases)


if __name__ == "__main__":
    main()
