#!/usr/bin/env python3
"""Goldens for RoBERTa and XLM-RoBERTa, from PyTorch `transformers`.

Run from the repository root after heads.py (it reuses heads.py's inputs, helpers and reference QA decoding, and
tokens.py's tricky strings; needs torch, transformers 5.x, tokenizers, safetensors):

    /path/to/venv/bin/python tests/golden/roberta.py

The tokenizers are trained here, on the fortunes of tests/data and the golden texts, with the `tokenizers` library,
and saved as transformers saves its own (`save_pretrained`: tokenizer.json, tokenizer_config.json):
  - RoBERTa: byte-level BPE, `<s> <pad> </s> <unk>` at ids 0..3 as in roberta-base and `<mask>` last (lstrip, as
    roberta-base's), RobertaProcessing `<s> A </s></s> B </s>`;
  - XLM-R: SentencePiece Unigram (WhitespaceSplit + Metaspace, `<mask>` last, as XLMRobertaTokenizer builds it),
    TemplateProcessing, clean_up_tokenization_spaces on (as multilingual-e5's tokenizer_config.json has it).
The models are seeded random, hidden 32, 2 layers, 4 heads, feed-forward 64, `pad_token_id` 1, `type_vocab_size` 1,
`max_position_embeddings` 66 (64 usable positions: RoBERTa's start at pad_token_id + 1), written to:
  tests/models/tiny-roberta-mlm/          RobertaForMaskedLM (hidden_act gelu)
  tests/models/tiny-roberta-classifier/   RobertaForSequenceClassification, 3 labels
  tests/models/tiny-roberta-ner/          RobertaForTokenClassification
  tests/models/tiny-roberta-qa/           RobertaForQuestionAnswering
  tests/models/tiny-xlmr-mlm/             XLMRobertaForMaskedLM (hidden_act gelu_new: its lm_head still uses the
                                          exact GELU, which the goldens tell apart)
  tests/models/tiny-xlmr-classifier/      XLMRobertaForSequenceClassification, 3 labels
  tests/models/tiny-xlmr-model/           XLMRobertaModel with its pooler, as multilingual-e5 and bge-m3 ship
  tests/golden/roberta.json               per family: token ids and offsets of tricky texts (pairs, truncation),
                                          mean and <s> embeddings, fill-mask logits and pipeline, classification
                                          logits and pipeline (pairs), token-classification logits, QA logits and
                                          answers (RoBERTa)

Texts are run through `AutoTokenizer.from_pretrained` of the saved folder, so the goldens follow what transformers
builds from the files (5.x rebuilds RoBERTa's and XLM-R's pipelines from the vocabulary in its own classes).
"""
import json
import os
import shutil
import sys

import torch
from tokenizers import AddedToken, ByteLevelBPETokenizer, Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    AutoTokenizer,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaTokenizer,
    XLMRobertaConfig,
    XLMRobertaForMaskedLM,
    XLMRobertaForSequenceClassification,
    XLMRobertaModel,
    XLMRobertaTokenizer,
    pipeline,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads as H  # noqa: E402
import tokens as T  # noqa: E402

OUT = os.path.join(H.ROOT, "tests", "golden", "roberta.json")
USABLE = H.MAX_POSITIONS  # 64 positions for tokens
PAD = 1
VOCAB_SIZE = 600
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
FILL_MASK = [t.replace("[MASK]", "<mask>") for t in H.FILL_MASK_TINY] + ["Zürich is a <mask> in Switzerland."]
EMBED_TEXTS = [c["text"] for c in H.CLASSIFY_INPUTS] + H.NER_TEXTS + [
    "Héllo wörld, café naïve 東京 🤗!", "  leading and trailing spaces  "]
CLASSIFY_INPUTS = H.CLASSIFY_INPUTS + [{"text": "Où est la gare?", "text_pair": "La gare est là-bas, près du café."}]
TOKEN_CASES = [c for c in T.CASES]


def corpus():
    texts = []
    with open(os.path.join(H.ROOT, "tests", "data", "fortunes", "train.jsonl"), encoding="utf-8") as f:
        texts += [json.loads(line)["text"] for line in f if line.strip()]
    texts += FILL_MASK + EMBED_TEXTS + [x for d in CLASSIFY_INPUTS for x in d.values()]
    texts += [x for d in H.QA_INPUTS for x in d.values()]
    texts += [c["text"] for c in T.CASES[:20]] + [c.get("text_pair", "") for c in T.CASES]
    return [t.replace("<mask>", "") for t in texts if t]


def roberta_tokenizer(d):
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus(), vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIALS)
    bpe.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)])
    os.makedirs(d, exist_ok=True)
    raw = os.path.join(d, "raw-tokenizer.json")
    bpe.save(raw)
    tok = RobertaTokenizer(tokenizer_file=raw, model_max_length=USABLE)
    tok.save_pretrained(d)
    os.remove(raw)
    return AutoTokenizer.from_pretrained(d)


def xlmr_tokenizer(d):
    t = Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    trainer = trainers.UnigramTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS, unk_token="<unk>")
    t.train_from_iterator(corpus(), trainer)
    vocab = [tuple(p) for p in json.loads(t.to_str())["model"]["vocab"]] + [("<mask>", 0.0)]
    assert [p for p, _ in vocab[:4]] == SPECIALS, vocab[:4]
    tok = XLMRobertaTokenizer(vocab=vocab, model_max_length=USABLE, clean_up_tokenization_spaces=True,
                              mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False,
                                                    special=True))
    shutil.rmtree(d, ignore_errors=True)
    tok.save_pretrained(d)
    return AutoTokenizer.from_pretrained(d)


def config(cls, vocab_size, **kw):
    return cls(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=USABLE + PAD + 1, type_vocab_size=1, initializer_range=0.3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=PAD, bos_token_id=0,
        eos_token_id=2, layer_norm_eps=1e-5, **kw)


def perturb(model, seed):
    """As heads.perturb, for RoBERTa's `lm_head.layer_norm` too; the token-type row too (it is added to every
    token, so a model that skipped it would be caught)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name or "token_type" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def save(model, name, tok_dir):
    d = os.path.join(H.MODELS, name)
    if d != tok_dir:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dir, f), os.path.join(d, f))
    model.eval()
    model.save_pretrained(d)
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    assert size < 200_000, f"{name}: {size} bytes is too big to commit"
    print(f"{name}: model.safetensors {size} bytes", file=sys.stderr)
    return d


def token_goldens(tok):
    out = []
    for c in TOKEN_CASES:
        max_length = c.get("max_length", USABLE)
        pair = c.get("text_pair") or None
        e = tok(c["text"], pair, truncation=True, max_length=max_length, return_offsets_mapping=True)
        out.append({"name": c["name"], "text": c["text"], "text_pair": c.get("text_pair"), "max_length": max_length,
                    "input_ids": e["input_ids"], "offsets": [list(o) for o in e["offset_mapping"]],
                    "decoded": tok.decode(e["input_ids"]),
                    "decoded_skip": tok.decode(e["input_ids"], skip_special_tokens=True)})
    return out


def embeddings(encoder, tok):
    enc = tok(EMBED_TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = encoder(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    mean = (hidden * mask).sum(1) / mask.sum(1)
    return [{"text": t, "input_ids": enc["input_ids"][i][enc["attention_mask"][i] == 1].tolist(), "mean": H.fl(v),
             "cls": H.fl(hidden[i, 0])} for i, (t, v) in enumerate(zip(EMBED_TEXTS, mean))]


def fill_mask(m, tok):
    fm = pipeline("fill-mask", model=m, tokenizer=tok, device="cpu")
    rows = []
    for text in FILL_MASK:
        res = fm(text, top_k=5)
        if isinstance(res[0], dict):
            res = [res]
        e = tok(text, return_tensors="pt")
        with torch.no_grad():
            logits = m(**e).logits[0]
        mask_rows = (e["input_ids"][0] == tok.mask_token_id).nonzero().reshape(-1).tolist()
        rows.append({
            "text": text, "input_ids": e["input_ids"][0].tolist(), "mask_rows": mask_rows,
            "mask_logits": [H.fl(logits[r]) for r in mask_rows],
            "predictions": [[{"score": H.f(p["score"]), "token": int(p["token"]), "token_str": p["token_str"],
                              "sequence": p["sequence"]} for p in row] for row in res],
            "min_score_gap": min(H.min_gap([p["score"] for p in row]) for row in res),
        })
    return rows


def classify(m, tok):
    clf = pipeline("text-classification", model=m, tokenizer=tok, device="cpu")
    rows = []
    for inp in CLASSIFY_INPUTS:
        e = tok(inp["text"], inp.get("text_pair"), return_tensors="pt")
        with torch.no_grad():
            logits = m(**e).logits[0]
        res = clf(dict(inp) if "text_pair" in inp else inp["text"], top_k=None)
        rows.append({**inp, "input_ids": e["input_ids"][0].tolist(), "logits": H.fl(logits),
                     "pipeline": [{"label": r["label"], "score": H.f(r["score"])} for r in res],
                     "min_score_gap": H.min_gap([r["score"] for r in res])})
    return rows


class WithoutTypes:
    """heads.qa_reference passes token_type_ids, which RoBERTa's tokenizer does not return (the model reads none)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, token_type_ids=None, **kw):
        return self.model(**kw)


class WithTypes:
    """heads.qa_reference reads `token_type_ids` from the encoding: all zeros, as the model would make them."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, *a, **kw):
        e = self.tok(*a, **kw)
        e["token_type_ids"] = torch.zeros_like(e["input_ids"])
        return e

    def __getattr__(self, k):
        return getattr(self.tok, k)


def main():
    ids3 = {0: "negative", 1: "neutral", 2: "positive"}
    ner_labels = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]))
    golden = {"tolerance_note": "float32 PyTorch outputs; compare with the tolerances named in tests/roberta.rs"}

    # --- RoBERTa ----------------------------------------------------------------------------------------------------
    tok_dir = os.path.join(H.MODELS, "tiny-roberta-mlm")
    shutil.rmtree(tok_dir, ignore_errors=True)
    tok = roberta_tokenizer(tok_dir)
    V = len(tok)
    g = {"tokens": token_goldens(tok)}
    torch.manual_seed(21)
    m = perturb(RobertaForMaskedLM(config(RobertaConfig, V, architectures=["RobertaForMaskedLM"])), 121).eval()
    save(m, "tiny-roberta-mlm", tok_dir)
    g["embeddings"] = embeddings(m.roberta, tok)
    g["fill_mask"] = fill_mask(m, tok)
    torch.manual_seed(22)
    m = perturb(RobertaForSequenceClassification(config(
        RobertaConfig, V, architectures=["RobertaForSequenceClassification"], id2label=ids3,
        label2id={v: k for k, v in ids3.items()})), 122).eval()
    save(m, "tiny-roberta-classifier", tok_dir)
    g["classifier"] = classify(m, tok)
    torch.manual_seed(23)
    m = perturb(RobertaForTokenClassification(config(
        RobertaConfig, V, architectures=["RobertaForTokenClassification"], id2label=ner_labels,
        label2id={v: k for k, v in ner_labels.items()})), 123).eval()
    save(m, "tiny-roberta-ner", tok_dir)
    rows = []
    for text in H.NER_TEXTS:
        e = tok(text, return_tensors="pt")
        with torch.no_grad():
            logits = m(**e).logits[0]
        rows.append({"text": text, "input_ids": e["input_ids"][0].tolist(), "logits": [H.fl(r) for r in logits]})
    g["ner"] = rows
    torch.manual_seed(24)
    m = perturb(RobertaForQuestionAnswering(config(RobertaConfig, V, architectures=["RobertaForQuestionAnswering"])),
                124).eval()
    save(m, "tiny-roberta-qa", tok_dir)
    max_seq_len = min(tok.model_max_length, 384)
    g["qa"] = [H.qa_reference(WithoutTypes(m), WithTypes(tok), q["question"], q["context"], max_seq_len,
                              min(max_seq_len // 2, 128)) for q in H.QA_INPUTS]
    golden["roberta"] = g

    # --- XLM-RoBERTa ------------------------------------------------------------------------------------------------
    tok_dir = os.path.join(H.MODELS, "tiny-xlmr-mlm")
    tok = xlmr_tokenizer(tok_dir)
    V = len(tok)
    g = {"tokens": token_goldens(tok)}
    torch.manual_seed(31)
    m = perturb(XLMRobertaForMaskedLM(config(XLMRobertaConfig, V, architectures=["XLMRobertaForMaskedLM"],
                                             hidden_act="gelu_new")), 131).eval()
    save(m, "tiny-xlmr-mlm", tok_dir)
    g["fill_mask"] = fill_mask(m, tok)
    torch.manual_seed(32)
    m = perturb(XLMRobertaForSequenceClassification(config(
        XLMRobertaConfig, V, architectures=["XLMRobertaForSequenceClassification"], id2label=ids3,
        label2id={v: k for k, v in ids3.items()})), 132).eval()
    save(m, "tiny-xlmr-classifier", tok_dir)
    g["classifier"] = classify(m, tok)
    torch.manual_seed(33)
    m = perturb(XLMRobertaModel(config(XLMRobertaConfig, V, architectures=["XLMRobertaModel"])), 133).eval()
    save(m, "tiny-xlmr-model", tok_dir)
    g["embeddings"] = embeddings(m, tok)
    golden["xlmr"] = g

    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes", file=sys.stderr)
    for fam in ("roberta", "xlmr"):
        g = golden[fam]
        print(fam, "fill-mask min top-k score gap", min(e["min_score_gap"] for e in g["fill_mask"]), file=sys.stderr)
        print(fam, "classifier min score gap", min(e["min_score_gap"] for e in g["classifier"]), file=sys.stderr)
        print(fam, "unk in embed texts", sum(e["input_ids"].count(3) for e in g["embeddings"]), file=sys.stderr)
    for q in golden["roberta"]["qa"]:
        print("qa", q["answer"], "windows", len(q["windows"]), "gaps",
              [w["runner_up_gap"] for w in q["windows"]], q["window_gap"], file=sys.stderr)


if __name__ == "__main__":
    main()
