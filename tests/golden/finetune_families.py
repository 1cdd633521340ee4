#!/usr/bin/env python3
"""Golden for full-encoder fine-tuning of BERT's relatives: gradients of every parameter and AdamW steps, from
PyTorch `transformers`, as tests/golden/finetune.py does for BERT (read its docstring first: the same batches, the
same float64 train-mode run with every dropout 0, the same five AdamW steps with transformers' Trainer's parameter
groups and clipping, the same recorded fields).

Run from the repository root (needs torch 2.x and transformers 5.x; CPU is enough):

    /work/venv/bin/python tests/golden/finetune_families.py

It writes tests/golden/finetune_families.json with one case per (family, task), each on a committed tiny checkpoint
loaded with the family's own class (`from_pretrained`) and tokenized by its own tokenizer:

  roberta_classify    tiny-roberta-classifier    RobertaForSequenceClassification (RobertaClassificationHead on <s>;
                      positions from padding_idx + 1, so the table's rows 0 and 1 get no gradient but decay)
  roberta_ner         tiny-roberta-ner           RobertaForTokenClassification (byte-level BPE, add_prefix_space)
  camembert_classify  tiny-camembert-classifier  CamembertForSequenceClassification
  distil_classify     tiny-distilbert-classifier DistilBertForSequenceClassification (pre_classifier + ReLU; no
                      token-type table)
  distil_ner          tiny-distilbert-ner        DistilBertForTokenClassification
  electra_classify    tiny-electra-classifier    ElectraForSequenceClassification (embedding_size 16 < hidden 32:
                      embeddings_project; ElectraClassificationHead with the exact GELU)
  electra_pair        tiny-electra-classifier    the same on text pairs (token_type_ids 1 on the second segment)
  electra_ner         tiny-electra-ner           ElectraForTokenClassification
  albert_classify     tiny-albert-classifier     AlbertForSequenceClassification (embedding_size 16, one layer run by
                      all 3 passes: its gradient is the sum of the passes'; `albert.pooler` + tanh)
  albert_pair         tiny-albert-classifier     the same on text pairs
  albert_ner          tiny-albert-ner            AlbertForTokenClassification
  roberta_qa          tiny-roberta-qa            RobertaForQuestionAnswering (qa_outputs on every token; the loss
                      softmaxes over all T positions, padding included, whose position is row padding_idx of the
                      table: that row and the word table's get no gradient)
  xlmr_qa             tiny-xlmr-model            XLMRobertaForQuestionAnswering on a bare encoder: its qa_outputs is
                      transformers' initialisation (seeded), recorded under `init` for the Rust test to start from
  camembert_qa        tiny-camembert-qa          CamembertForQuestionAnswering

The QA cases are (question, context) pairs whose answers are character spans of the context, mapped to token indices
with the offsets mapping (start_positions, end_positions), as tests/golden/finetune.py's `qa`.

The families without token types (RoBERTa's, DistilBERT) get no `token_type_ids` (the JSON holds zeros for them);
RoBERTa's position ids are transformers' own (`create_position_ids_from_input_ids`). The others' are asked for
(`return_token_type_ids`): transformers 5's AlbertTokenizer leaves them out otherwise (tests/golden/electra_albert.py
says why that is wrong), as bertgpu does not.

The weight-decay groups are transformers' Trainer's (`Trainer.get_decay_parameter_names`): every parameter except
the biases and the parameters of `nn.LayerNorm` modules (DistilBERT's `sa_layer_norm`, `output_layer_norm` too).

Values are written with 10 significant digits (the Rust test compares float32 results at relative 2e-5 and
absolute 2e-4, far above that rounding), which keeps the file small.
"""
import json
import os
import sys

import torch
from transformers import (
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
    CamembertForQuestionAnswering,
    CamembertForSequenceClassification,
    DistilBertForSequenceClassification,
    DistilBertForTokenClassification,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    XLMRobertaForQuestionAnswering,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# finetune.py's batches, hyperparameters and recorded run, shared with BERT's golden (and imported from here by the
# other families' scripts: LR, WD, MAX_NORM, MODELS...).
from finetune import (  # noqa: E402
    CLASSIFY, LR, MAX_NORM, MODELS, NER, PAIR, ROOT, STEPS, WD, adamw_steps, answer_span, load, rows, word_labels)
import finetune as FT  # noqa: E402

OUT = os.path.join(ROOT, "tests", "golden", "finetune_families.json")
MAX_TOKENS = 32
QA = [
    ("where is sarah?", "she lives in london.", "london"),
    ("who came?", "john and paul came.", "john and paul"),
    ("who is it?", "it is paul.", "paul"),
]


def flat(t):
    return [float(f"{v:.10g}") for v in t.detach().reshape(-1).tolist()]


def check_batch(case, enc, tok):
    return FT.check_batch(case, enc, tok, MAX_TOKENS)


def decay_names(model):
    """transformers' Trainer: not the biases, not the parameters of LayerNorm modules."""
    in_norm = set()
    for mn, m in model.named_modules():
        if isinstance(m, torch.nn.LayerNorm):
            in_norm.update(f"{mn}.{pn}" if mn else pn for pn, _ in m.named_parameters(recurse=False))
    return [n for n, _ in model.named_parameters() if n not in in_norm and not n.endswith("bias")]


def run(case, name, model, enc, labels, types):
    batch = {k: enc[k] for k in ("input_ids", "attention_mask")}
    if types:
        batch["token_type_ids"] = enc["token_type_ids"]
    batch.update(labels)
    decay = set(decay_names(model))
    no_decay = [n for n, _ in model.named_parameters() if n not in decay]
    ids = enc["input_ids"]
    out = {
        "model": name,
        "family": model.config.model_type,
        "task": "token" if "ner" in case else "qa" if "qa" in case else "sequence",
        "input_ids": rows(ids),
        "token_type_ids": rows(enc["token_type_ids"]) if types else rows(torch.zeros_like(ids)),
        "attention_mask": rows(enc["attention_mask"]),
        **adamw_steps(case, model, batch, no_decay, flat),
    }
    for k, v in labels.items():
        out[k] = v.tolist()
    return out


def classify_case(case, cls, name, types, pairs=False, seps=None, runner=run, **tok_args):
    """CLASSIFY (or with `pairs`, PAIR: token types 1 on the second segment where the family has them); `seps`: the
    number of separator tokens each pair must hold where nothing else tells its sides apart. `runner`: `run` or a
    script's own (finetune_rotary.py's renames the records)."""
    model, tok = load(cls, name, **tok_args)
    if pairs:
        enc = tok([a for a, _, _ in PAIR], [b for _, b, _ in PAIR], padding=True, return_tensors="pt",
                  return_token_type_ids=types)
        assert not types or all(1 in r for r in enc["token_type_ids"].tolist())
        assert seps is None or all(r.count(tok.sep_token_id) == seps for r in enc["input_ids"].tolist())
        labels = {"labels": torch.tensor([y for _, _, y in PAIR])}
    else:
        enc = tok([t for t, _ in CLASSIFY], padding=True, return_tensors="pt", return_token_type_ids=types)
        labels = {"labels": torch.tensor([y for _, y in CLASSIFY])}
    check_batch(case, enc, tok)
    return runner(case, name, model, enc, labels, types)


def ner_case(case, cls, name, types, runner=run, **tok_args):
    model, tok = load(cls, name, **tok_args)
    label2id = {v: int(k) for k, v in model.config.id2label.items()}
    enc = tok([w for w, _ in NER], is_split_into_words=True, padding=True, return_tensors="pt",
              return_token_type_ids=types)
    check_batch(case, enc, tok)
    labels = [word_labels(case, enc, i, words, tags, label2id) for i, (words, tags) in enumerate(NER)]
    return runner(case, name, model, enc, {"labels": torch.tensor(labels)}, types)


def qa_case(case, cls, name, init=False):
    """(question, context) pairs; the answer's first and last token found through the offsets mapping. With `init`,
    the checkpoint is a bare encoder whose `qa_outputs` transformers initialises (seeded): its values, exact f32,
    are recorded under `init`."""
    torch.manual_seed(0)
    model, tok = load(cls, name)
    enc = tok([q for q, _, _ in QA], [c for _, c, _ in QA], padding=True, return_offsets_mapping=True,
              return_tensors="pt")
    assert "token_type_ids" not in enc
    check_batch(case, enc, tok)
    assert (enc["input_ids"] == tok.pad_token_id).any(), f"{case}: no padding, nothing for padding_idx to do"
    starts, ends = [], []
    for i, (_, ctx, ans) in enumerate(QA):
        s, e = answer_span(enc, i, ctx, ans)
        got = tok.decode(enc["input_ids"][i][s:e + 1]).strip()
        assert got.lower() == ans.lower(), f"{case}: {got!r}"
        starts.append(s)
        ends.append(e)
    head = {}
    if init:
        head = {n: [float(repr(v)) for v in p.detach().float().reshape(-1).tolist()]
                for n, p in model.named_parameters() if n.startswith("qa_outputs.")}
        assert len(head) == 2
    labels = {"start_positions": torch.tensor(starts), "end_positions": torch.tensor(ends)}
    out = run(case, name, model, enc, labels, False)
    if init:
        out["init"] = head
    return out


def summary(name, c):
    """One line per case: the batch (and a masked LM's selected tokens), the first loss and gradient norm, the loss
    after the steps."""
    t = len(c["input_ids"][0])
    sel = f", {sum(l != -100 for r in c['labels'] for l in r)} selected," if c["task"] == "pretrain" else ""
    return (f"{name}: B {len(c['input_ids'])} T {t}{sel} loss {c['loss']:.17g} grad_norm {c['grad_norms'][0]:.17g} "
            f"loss after {STEPS} steps {c['losses'][-1]:.17g} ({len(c['grads'])} parameters; zero: {c['zero_grads']})")


def write(out, cases, embeddings=None):
    """The golden file of these cases (and embedding cases) with the torch version, compact, its keys sorted; a
    summary printed."""
    golden = {"torch": torch.__version__.split("+")[0], "dtype": "float64", "cases": cases}
    if embeddings is not None:
        golden["embeddings"] = embeddings
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    print(f"wrote {out}: {os.path.getsize(out)} bytes")
    for name, c in cases.items():
        print(summary(name, c))
    for name, c in (embeddings or {}).items():
        print(f"{name} embeddings: loss {c['loss']:.17g} ({len(c['grads'])} parameters)")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing here is random; fixed anyway
    cases = {
        "roberta_classify": classify_case("roberta_classify", RobertaForSequenceClassification,
                                          "tiny-roberta-classifier", False),
        "roberta_ner": ner_case("roberta_ner", RobertaForTokenClassification, "tiny-roberta-ner", False,
                                add_prefix_space=True),
        "camembert_classify": classify_case("camembert_classify", CamembertForSequenceClassification,
                                            "tiny-camembert-classifier", False),
        "distil_classify": classify_case("distil_classify", DistilBertForSequenceClassification,
                                         "tiny-distilbert-classifier", False),
        "distil_ner": ner_case("distil_ner", DistilBertForTokenClassification, "tiny-distilbert-ner", False),
        "electra_classify": classify_case("electra_classify", ElectraForSequenceClassification,
                                          "tiny-electra-classifier", True),
        "electra_pair": classify_case("electra_pair", ElectraForSequenceClassification, "tiny-electra-classifier",
                                      True, pairs=True),
        "electra_ner": ner_case("electra_ner", ElectraForTokenClassification, "tiny-electra-ner", True),
        "albert_classify": classify_case("albert_classify", AlbertForSequenceClassification,
                                         "tiny-albert-classifier", True),
        "albert_pair": classify_case("albert_pair", AlbertForSequenceClassification, "tiny-albert-classifier", True,
                                     pairs=True),
        "albert_ner": ner_case("albert_ner", AlbertForTokenClassification, "tiny-albert-ner", True),
        "roberta_qa": qa_case("roberta_qa", RobertaForQuestionAnswering, "tiny-roberta-qa"),
        "xlmr_qa": qa_case("xlmr_qa", XLMRobertaForQuestionAnswering, "tiny-xlmr-model", init=True),
        "camembert_qa": qa_case("camembert_qa", CamembertForQuestionAnswering, "tiny-camembert-qa"),
    }
    write(OUT, cases)


if __name__ == "__main__":
    main()
