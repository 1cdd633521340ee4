#!/usr/bin/env python3
"""Golden for pre-training (masked LM + next-sentence prediction): the loss, the gradient of every parameter and
five AdamW steps of transformers' `BertForPreTraining`, as tests/golden/finetune.py does for the fine-tuning heads.

Run from the repository root (torch 2.x, transformers 5.x; CPU is enough):

    .venv/bin/python tests/golden/pretrain.py

It writes tests/golden/pretrain.json: one batch of three sentence pairs through tests/models/tiny-pretraining (BERT,
hidden 32, 2 layers, vocab 480, dropout 0, word embeddings tied to the MLM decoder), tokenized by
`AutoTokenizer.from_pretrained` on the same folder as `[CLS] A [SEP] B [SEP]` and padded to the longest pair. The
masking is fixed, not drawn: every fourth non-special token of each row is selected (its label the original id),
and of those the first becomes [MASK], the second a given other token, the third stays as it is, in turn (BERT's
80/10/10 kinds, each present). The NSP labels are 0 (B follows A), 1 (B is random), 0. The loss is the model's own:
mean cross-entropy over the selected tokens plus mean cross-entropy of the NSP logits.

The model runs in train mode with every dropout 0 and in float64, as finetune.py's. The JSON holds the inputs
(input_ids after masking, token_type_ids, attention_mask), `labels` (B × T, -100 where no loss is taken) and
`next_sentence_label`, the `loss` with its two parts, `grads` (every parameter of `model.named_parameters()`,
flattened row-major; the decoder's weight is the word embeddings, so `bert.embeddings.word_embeddings.weight`'s
gradient holds both uses, and the decoder's bias appears once, as `cls.predictions.bias`), `shapes`, and then
`losses`, `grad_norms` and `params_after` of 5 AdamW steps on the same batch (lr LR, weight decay WD except on biases
and LayerNorm weights, clipping at MAX_NORM, constant learning rate). `zero_grads` lists the tensors whose exact
gradient is zero (the attention key biases), checked with an absolute bound.
"""
import json
import os

import torch
from transformers import AutoTokenizer, BertForPreTraining

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests", "models", "tiny-pretraining")
OUT = os.path.join(ROOT, "tests", "golden", "pretrain.json")

LR = 1e-3
WD = 0.01
MAX_NORM = 1.0
STEPS = 5

PAIRS = [
    ("the man went to the store.", "he bought a gallon of milk.", 0),
    ("my name is sarah and i live in london.", "penguins are flightless birds.", 1),
    ("what time is it?", "it is five o'clock and the sun is setting.", 0),
]


def flat(t):
    return [float(f"{v:.17g}") for v in t.detach().reshape(-1).tolist()]


def rows(t):
    return [[int(v) for v in r] for r in t.tolist()]


def main():
    torch.set_num_threads(1)
    model = BertForPreTraining.from_pretrained(MODEL, attn_implementation="eager")
    tok = AutoTokenizer.from_pretrained(MODEL)
    cfg = model.config
    assert cfg.hidden_dropout_prob == 0.0 and cfg.attention_probs_dropout_prob == 0.0
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
    model.double()
    model.train()

    enc = tok([a for a, _, _ in PAIRS], [b for _, b, _ in PAIRS], padding=True, return_tensors="pt")
    assert (enc["input_ids"] != tok.unk_token_id).all(), "an [UNK] in the batch"
    lens = enc["attention_mask"].sum(1).tolist()
    assert max(lens) == enc["input_ids"].shape[1] and min(lens) <= max(lens) - 3, lens
    special = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}
    input_ids = enc["input_ids"].clone()
    labels = torch.full_like(input_ids, -100)
    kinds = 0
    other = tok.convert_tokens_to_ids("the")
    for i in range(input_ids.shape[0]):
        real = [j for j in range(input_ids.shape[1]) if int(input_ids[i, j]) not in special]
        for j in real[1::4]:
            labels[i, j] = input_ids[i, j]
            kind = kinds % 3
            kinds += 1
            if kind == 0:
                input_ids[i, j] = tok.mask_token_id
            elif kind == 1:
                input_ids[i, j] = other if int(input_ids[i, j]) != other else tok.convert_tokens_to_ids("a")
    assert kinds >= 6, kinds
    nsp = torch.tensor([y for _, _, y in PAIRS])
    batch = {"input_ids": input_ids, "token_type_ids": enc["token_type_ids"], "attention_mask": enc["attention_mask"],
             "labels": labels, "next_sentence_label": nsp}

    named = list(model.named_parameters())
    names = [n for n, _ in named]
    assert "cls.predictions.bias" in names and "cls.predictions.decoder.weight" not in names, names
    no_decay = [n for n in names if n.endswith("bias") or "LayerNorm.weight" in n]
    groups = [
        {"params": [p for n, p in named if n not in no_decay], "weight_decay": WD},
        {"params": [p for n, p in named if n in no_decay], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    losses, norms = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        out = model(**batch)
        loss = out.loss
        loss.backward()
        if step == 0:
            grads = {n: flat(p.grad) for n, p in named}
            total = torch.sqrt(sum((p.grad ** 2).sum() for _, p in named))
            zero_grads = [n for n, p in named if p.grad.norm() < 1e-10 * total]
            sel = labels != -100
            ce = torch.nn.functional.cross_entropy
            mlm = ce(out.prediction_logits[sel], labels[sel]).item()
            nsp_loss = ce(out.seq_relationship_logits, nsp).item()
            assert abs(mlm + nsp_loss - loss.item()) < 1e-12
        losses.append(float(f"{loss.item():.17g}"))
        norms.append(float(f"{torch.nn.utils.clip_grad_norm_([p for _, p in named], MAX_NORM).item():.17g}"))
        opt.step()
    golden = {
        "torch": torch.__version__.split("+")[0], "dtype": "float64", "model": "tiny-pretraining",
        "input_ids": rows(input_ids), "token_type_ids": rows(enc["token_type_ids"]),
        "attention_mask": rows(enc["attention_mask"]), "labels": rows(labels), "next_sentence_label": nsp.tolist(),
        "loss": losses[0], "mlm_loss": mlm, "nsp_loss": nsp_loss, "grads": grads,
        "shapes": {n: list(p.shape) for n, p in named}, "lr": LR, "weight_decay": WD, "max_norm": MAX_NORM,
        "steps": STEPS, "no_decay": no_decay, "zero_grads": zero_grads, "losses": losses, "grad_norms": norms,
        "params_after": {n: flat(p) for n, p in named},
    }
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, sort_keys=True, separators=(",", ":"))
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes; B {len(PAIRS)} T {input_ids.shape[1]}, {kinds} selected, "
          f"loss {losses[0]:.17g} (mlm {mlm:.6g}, nsp {nsp_loss:.6g}), after {STEPS} steps {losses[-1]:.6g}; "
          f"zero: {zero_grads}")


if __name__ == "__main__":
    main()
