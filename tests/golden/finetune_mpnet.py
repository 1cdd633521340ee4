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
import json
import os
import sys

import torch
from transformers import MPNetForQuestionAnswering, MPNetForSequenceClassification, MPNetForTokenClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_families as ff  # noqa: E402

OUT = os.path.join(ff.ROOT, "tests", "golden", "finetune_mpnet.json")


def pair_case():
    """Text pairs: MPNet has no token types, so a pair is `<s> a </s></s> b </s>` and nothing else tells the sides
    apart (finetune_families.py's pair cases check token types, so this one is its own)."""
    model, tok = ff.load(MPNetForSequenceClassification, "tiny-mpnet-classifier")
    enc = tok([a for a, _, _ in ff.PAIR], [b for _, b, _ in ff.PAIR], padding=True, return_tensors="pt")
    assert "token_type_ids" not in enc
    sep = tok.sep_token_id
    assert all(r.count(sep) == 3 for r in enc["input_ids"].tolist()), "<s> a </s></s> b </s>"
    ff.check_batch("mpnet_pair", enc, tok)
    return ff.run("mpnet_pair", "tiny-mpnet-classifier", model, enc,
                  {"labels": torch.tensor([y for _, _, y in ff.PAIR])}, False)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing here is random; fixed anyway
    cases = {
        "mpnet_classify": ff.classify_case("mpnet_classify", MPNetForSequenceClassification, "tiny-mpnet-classifier",
                                           False),
        "mpnet_pair": pair_case(),
        "mpnet_ner": ff.ner_case("mpnet_ner", MPNetForTokenClassification, "tiny-mpnet-ner", False),
        "mpnet_qa": ff.qa_case("mpnet_qa", MPNetForQuestionAnswering, "tiny-mpnet-qa"),
    }
    for name, c in cases.items():
        rel = [n for n in c["grads"] if "relative_attention_bias" in n]
        assert len(rel) == 1 and rel[0] not in c["no_decay"], f"{name}: the relative bias table {rel}"
    golden = {"torch": torch.__version__.split("+")[0], "dtype": "float64", "cases": cases}
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes")
    for name, c in cases.items():
        t = len(c["input_ids"][0])
        print(f"{name}: B {len(c['input_ids'])} T {t} loss {c['loss']:.17g} grad_norm {c['grad_norms'][0]:.17g} "
              f"loss after {ff.STEPS} steps {c['losses'][-1]:.17g} ({len(c['grads'])} parameters; zero: {c['zero_grads']})")


if __name__ == "__main__":
    main()
