#!/usr/bin/env python3
"""The folder `bertgpu pretrain` writes for a DeBERTa-v2/v3 loads in transformers as `DebertaV2ForMaskedLM` (its
`lm_predictions.lm_head`, tied to the word embeddings), with no missing or unexpected tensor, and predicts what
bertgpu's `fill-mask` predicts on it: tests/golden/pretrain_families_load.py's check (read its docstring) on
tests/models/tiny-deberta-mlm.

Run from the repository root after `cargo build --release` (or with BERTGPU_CLI naming another build of the CLI):

    /work/venv/bin/python tests/golden/pretrain_deberta_load.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretrain_families_load as pfl  # noqa: E402

if __name__ == "__main__":
    pfl.main([("tiny-deberta-mlm", "DebertaV2ForMaskedLM")])
