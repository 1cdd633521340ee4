#!/usr/bin/env python3
"""Golden for full-encoder fine-tuning: gradients of every BERT parameter and AdamW steps, from PyTorch `transformers`.

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    .venv/bin/python tests/golden/finetune.py

It writes tests/golden/finetune.json with four cases, each a fixed batch run through one of the committed tiny
checkpoints (BERT, hidden 32, 2 layers, 4 heads, intermediate 64, vocab 480, exact GELU, dropout 0), loaded with
`from_pretrained` and tokenized with `AutoTokenizer.from_pretrained` on the same folder. Every batch is padded to its
longest sequence (at least one sequence much shorter than the longest), so the padding and the attention mask are
exercised in the backward pass too:

  classify  tests/models/tiny-classifier (BertForSequenceClassification, 3 labels), 4 single texts, class labels
  pair      tests/models/tiny-classifier, 3 text pairs (token_type_ids 1 on the second segment), class labels
  ner       tests/models/tiny-ner (BertForTokenClassification), 3 pre-split word lists with one tag per word (the
            model's id2label); the tag goes on the first word-piece of each word (`word_ids()`), the other pieces,
            the special tokens and the padding get -100, as transformers' token-classification examples do
  qa        tests/models/tiny-qa (BertForQuestionAnswering), 2 (question, context) pairs; the answers are char spans
            of the context mapped to token indices with the offsets mapping (start_positions, end_positions)

The loss is always the model's own: cross-entropy mean over the batch (classify, pair), over the tokens whose label
is not -100 (ner), (start CE + end CE) / 2 (qa).

The models run in train mode, with every dropout probability 0 (asserted), with eager attention, and in float64
(`model.double()`): this golden is the exact reference, and the Rust test compares our float32 gradients with it by
the relative error per tensor, ‖ours − golden‖ / ‖golden‖, so the reference itself must carry no float32 rounding.

For each case the JSON holds the inputs (input_ids, token_type_ids, attention_mask as B × T rows, and the labels as the
model takes them), `loss` and `grads` (every parameter of `model.named_parameters()`, under its Hugging Face name,
flattened row-major, with `shapes`) at the committed weights, then `steps` = 5 AdamW steps on the same batch:

    torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)

with the two parameter groups of transformers' Trainer: weight decay WD on every parameter except the biases and the
LayerNorm weights (names ending in `bias` or containing `LayerNorm.weight`, listed in `no_decay`), 0 on those.
Before each step the global gradient norm is clipped to MAX_NORM with `torch.nn.utils.clip_grad_norm_`; the learning
rate is the constant LR (no schedule). Recorded per step: `losses` (the loss before that step's update) and
`grad_norms` (the norm before clipping); then `params_after`, every parameter after the last step.

Some gradients are zero in exact arithmetic, and the golden holds only float64 rounding noise (norm ~1e-16) for
them; `zero_grads` lists the tensors whose gradient norm is below 1e-10 times the global norm, so that the Rust test
checks them with an absolute bound instead of the relative error (which is meaningless there) and skips them in
`params_after` (AdamW divides the noise by its own size: an f32 noise of ~1e-8, above eps, moves them by ~lr per
step, differently from the float64 run; the move cannot change the loss, which is why the gradient is zero):
  every case  bert.encoder.layer.*.attention.self.key.bias (adds q·b_k to every score of a query row: the softmax
              does not see a shift shared by the whole row)
  qa          qa_outputs.bias and the last bert.encoder.layer.1.output.LayerNorm.bias (each shifts every start or
              end logit of a sequence by the same amount; the loss softmaxes over all T positions, question and
              padding included, as transformers does)

The token-classification and QA models of transformers 5 are built with add_pooling_layer=False: they have no
`bert.pooler.*` parameters, and none are added here; each case lists exactly the parameters its model has.
"""
import json
import os

import torch
from transformers import (AutoTokenizer, BertForQuestionAnswering, BertForSequenceClassification,
                          BertForTokenClassification)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models")
OUT = os.path.join(ROOT, "tests", "golden", "finetune.json")

LR = 1e-3
WD = 0.01
MAX_NORM = 1.0
STEPS = 5
MAX_TOKENS = 24

CLASSIFY = [
    ("i love this movie, it is great and i will watch it again!", 2),
    ("this is the worst day of my life.", 0),
    ("the book is on the table.", 1),
    ("a", 1),
]
PAIR = [
    ("what time is it?", "it is five o'clock.", 1),
    ("the food was good.", "but the service was slow and the room was cold.", 0),
    ("she opened the door.", "a man was standing outside.", 2),
]
NER = [
    (["my", "name", "is", "sarah", "and", "i", "live", "in", "london", "."],
     ["O", "O", "O", "B-PER", "O", "O", "O", "O", "B-LOC", "O"]),
    (["John", "Smith", "visited", "Zürich", "for", "the", "United", "Nations", "."],
     ["B-PER", "I-PER", "O", "B-LOC", "O", "O", "B-ORG", "I-ORG", "O"]),
    (["Basel", "is", "nice"],
     ["B-LOC", "O", "O"]),
]
QA = [
    ("where does sarah live?", "i live in london.", "london"),
    ("What did John visit?", "John Smith visited Paris and Berlin last year.", "Paris and Berlin"),
]


def flat(t):
    return [float(f"{v:.17g}") for v in t.detach().reshape(-1).tolist()]


def rows(t):
    return [[int(v) for v in r] for r in t.tolist()]


def load(cls, name, **tok_args):
    """A committed checkpoint in float64 and train mode, every dropout asserted 0, and its tokenizer."""
    d = os.path.join(MODELS, name)
    model = cls.from_pretrained(d, attn_implementation="eager")
    tok = AutoTokenizer.from_pretrained(d, **tok_args)
    model.double()
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            assert m.p == 0.0, f"{name}: dropout {m.p}"
    return model, tok


def load_bert(cls, name):
    """load, with BERT's config's dropout probabilities asserted 0 too."""
    model, tok = load(cls, name)
    cfg = model.config
    assert cfg.hidden_dropout_prob == 0.0 and cfg.attention_probs_dropout_prob == 0.0, name
    assert getattr(cfg, "classifier_dropout", None) in (None, 0.0), name
    return model, tok


def check_batch(case, enc, tok, max_tokens=MAX_TOKENS):
    """The batch fits, is padded (one sequence at least 3 tokens shorter than the longest) and has no unknown
    token."""
    t = enc["input_ids"].shape[1]
    lens = enc["attention_mask"].sum(1).tolist()
    assert t <= max_tokens, f"{case}: {t} tokens"
    assert max(lens) == t and min(lens) <= t - 3, f"{case}: lengths {lens}"
    if tok.unk_token_id is not None:
        assert (enc["input_ids"] != tok.unk_token_id).all(), f"{case}: unknown token in the batch"


def word_labels(case, enc, i, words, tags, label2id):
    """Sequence i's token labels: each word's tag on its first piece (`word_ids()`), -100 on the other pieces, the
    special tokens and the padding."""
    row, prev = [], None
    for w in enc.word_ids(i):
        row.append(-100 if w is None or w == prev else label2id[tags[w]])
        prev = w
    assert sum(l != -100 for l in row) == len(words), f"{case}: a word lost its label in {words}"
    return row


def answer_span(enc, i, ctx, ans):
    """The first and last context token of sequence i holding the answer, a character span of the context, found
    through the offsets mapping."""
    c0 = ctx.index(ans)
    c1 = c0 + len(ans)
    seq = enc.sequence_ids(i)
    offs = enc["offset_mapping"][i].tolist()
    ctx_toks = [j for j, s in enumerate(seq) if s == 1]
    s = next(j for j in ctx_toks if offs[j][0] <= c0 < offs[j][1])
    e = next(j for j in ctx_toks if offs[j][0] < c1 <= offs[j][1])
    assert s <= e
    return s, e


def adamw_steps(case, model, batch, no_decay, flat=flat):
    """The recorded run on one batch: the loss and every gradient at the committed weights, then STEPS AdamW steps
    with the Trainer's two groups (weight decay WD except on `no_decay`), the global gradient norm clipped to
    MAX_NORM before each; `flat` writes the values (its precision is the golden's)."""
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if n not in no_decay], "weight_decay": WD},
        {"params": [p for n, p in named if n in no_decay], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    losses, norms, grads, zero_grads = [], [], None, None
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        assert all(p.grad is not None for _, p in named), f"{case}: a parameter got no gradient"
        if step == 0:
            grads = {n: flat(p.grad) for n, p in named}
            total = torch.sqrt(sum((p.grad ** 2).sum() for _, p in named))
            zero_grads = [n for n, p in named if p.grad.norm() < 1e-10 * total]
        losses.append(float(f"{loss.item():.17g}"))
        norm = torch.nn.utils.clip_grad_norm_([p for _, p in named], MAX_NORM)
        norms.append(float(f"{norm.item():.17g}"))
        opt.step()
    return {
        "loss": losses[0],
        "grads": grads,
        "shapes": {n: list(p.shape) for n, p in named},
        "lr": LR,
        "weight_decay": WD,
        "max_norm": MAX_NORM,
        "steps": STEPS,
        "no_decay": no_decay,
        "zero_grads": zero_grads,
        "losses": losses,
        "grad_norms": norms,
        "params_after": {n: flat(p) for n, p in named},
    }


def run(case, name, model, enc, labels):
    batch = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    batch.update(labels)
    no_decay = [n for n, _ in model.named_parameters() if n.endswith("bias") or "LayerNorm.weight" in n]
    # The file is written with sorted keys: this order is for the reader only.
    out = {
        "model": name,
        "input_ids": rows(enc["input_ids"]),
        "token_type_ids": rows(enc["token_type_ids"]),
        "attention_mask": rows(enc["attention_mask"]),
        **adamw_steps(case, model, batch, no_decay),
    }
    for k, v in labels.items():
        out[k] = v.tolist()
    return out


def classify_case():
    model, tok = load_bert(BertForSequenceClassification, "tiny-classifier")
    enc = tok([t for t, _ in CLASSIFY], padding=True, return_tensors="pt")
    check_batch("classify", enc, tok)
    labels = {"labels": torch.tensor([y for _, y in CLASSIFY])}
    return run("classify", "tiny-classifier", model, enc, labels)


def pair_case():
    model, tok = load_bert(BertForSequenceClassification, "tiny-classifier")
    enc = tok([a for a, _, _ in PAIR], [b for _, b, _ in PAIR], padding=True, return_tensors="pt")
    check_batch("pair", enc, tok)
    assert all(1 in r for r in enc["token_type_ids"].tolist())
    labels = {"labels": torch.tensor([y for _, _, y in PAIR])}
    return run("pair", "tiny-classifier", model, enc, labels)


def ner_case():
    model, tok = load_bert(BertForTokenClassification, "tiny-ner")
    label2id = {v: int(k) for k, v in model.config.id2label.items()}
    enc = tok([w for w, _ in NER], is_split_into_words=True, padding=True, return_tensors="pt")
    check_batch("ner", enc, tok)
    labels = []
    for i, (words, tags) in enumerate(NER):
        assert len(words) == len(tags)
        labels.append(word_labels("ner", enc, i, words, tags, label2id))
    assert any(len(tok.tokenize(w)) > 1 for words, _ in NER for w in words), "ner: no word has several pieces"
    return run("ner", "tiny-ner", model, enc, {"labels": torch.tensor(labels)})


def qa_case():
    model, tok = load_bert(BertForQuestionAnswering, "tiny-qa")
    enc = tok([q for q, _, _ in QA], [c for _, c, _ in QA], padding=True, return_offsets_mapping=True,
              return_tensors="pt")
    check_batch("qa", enc, tok)
    starts, ends = [], []
    for i, (_, ctx, ans) in enumerate(QA):
        s, e = answer_span(enc, i, ctx, ans)
        assert tok.decode(enc["input_ids"][i][s:e + 1]) == ans.lower(), tok.decode(enc["input_ids"][i][s:e + 1])
        starts.append(s)
        ends.append(e)
    labels = {"start_positions": torch.tensor(starts), "end_positions": torch.tensor(ends)}
    return run("qa", "tiny-qa", model, enc, labels)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing here is random; fixed anyway
    cases = {"classify": classify_case(), "pair": pair_case(), "ner": ner_case(), "qa": qa_case()}
    golden = {"torch": torch.__version__.split("+")[0], "dtype": "float64", "cases": cases}
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes")
    for name, c in cases.items():
        t = len(c["input_ids"][0])
        print(f"{name}: B {len(c['input_ids'])} T {t} loss {c['loss']:.17g} grad_norm {c['grad_norms'][0]:.17g} "
              f"loss after {STEPS} steps {c['losses'][-1]:.17g} ({len(c['grads'])} parameters; zero: {c['zero_grads']})")


if __name__ == "__main__":
    main()
