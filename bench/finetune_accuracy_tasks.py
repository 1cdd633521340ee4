"""Fine-tuning accuracy on token classification (NER) and question answering, bertgpu against PyTorch (BENCHMARKS.md,
"Fine-tuning"): all-MiniLM-L6-v2 fine-tuned on DATA/ner or DATA/qa (default DATA: tests/data/fortunes-attributions,
made from real quotations by scripts/finetune-datasets.py) by transformers and by `bertgpu fine-tune`, with one
recipe on both sides: every parameter, AdamW (weight decay 0.01, none on biases and LayerNorm weights), linear warm-up
over 10% of the steps then linear decay to 0, gradients clipped at norm 1.0, batch 16, dropout off (bertgpu does not
apply dropout yet), a new head from N(0, initializer_range) with zero bias. The data are prepared as transformers'
example scripts do: NER as run_ner.py (the first piece of each word carries its tag, the other pieces -100; batches
padded to their longest row), QA as run_qa.py (question + context in windows of --max-length tokens overlapping by
--doc-stride, every window padded to --max-length; a window without the answer, or a question without one as in
SQuAD v2, points at [CLS]).

Both fine-tuned models are then loaded with transformers' from_pretrained (bertgpu's output folder as it is) and
scored by the same code below: NER by entity-level F1 (seqeval, CoNLL's rule), QA by SQuAD v2's exact match and F1
(run_qa's post-processing with version_2_with_negative: the best span of length <= 30 among the 20 best starts and
ends against the [CLS] score, threshold 0; SQuAD's answer normalisation). Each side runs several seeds (shuffle order
and new-head initialisation differ between the two implementations; only the recipe is shared); the table gives
every seed and the means.

    cargo build --release --locked --bin bertgpu
    python bench/finetune_accuracy_tasks.py ner [--epochs 3] [--lr 5e-5] [--seeds 3] [--data DIR]
    python bench/finetune_accuracy_tasks.py qa [--epochs 3] [--lr 5e-5] [--seeds 3] [--max-length 128] [--doc-stride 64]

Needs torch, transformers and seqeval. Runs bertgpu's CLI on the CPU (BERTGPU_BIN: another binary than
target/release/bertgpu); PyTorch on TORCH_THREADS threads (default 2)."""
import argparse
import collections
import json
import math
import os
import re
import statistics
import string
import subprocess
import tempfile

import numpy as np
import torch
from seqeval.metrics import f1_score
from transformers import (AutoTokenizer, BertForQuestionAnswering, BertForTokenClassification,
                          get_linear_schedule_with_warmup)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models/all-MiniLM-L6-v2")
BIN = os.environ.get("BERTGPU_BIN", os.path.join(ROOT, "target/release/bertgpu"))
BATCH = 16
torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))

ap = argparse.ArgumentParser()
ap.add_argument("task", choices=["ner", "qa"])
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--lr", type=float, default=5e-5)
ap.add_argument("--seeds", type=int, default=3)
ap.add_argument("--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1")
ap.add_argument("--data", default="tests/data/fortunes-attributions")
ap.add_argument("--max-length", type=int, default=128, help="QA: window length (run_qa's max_seq_length)")
ap.add_argument("--doc-stride", type=int, default=64, help="QA: context tokens shared by consecutive windows")
args = ap.parse_args()
DATA = os.path.join(ROOT, args.data, args.task)
train = [json.loads(l) for l in open(os.path.join(DATA, "train.jsonl"))]
test = [json.loads(l) for l in open(os.path.join(DATA, "test.jsonl"))]
tok = AutoTokenizer.from_pretrained(MODEL)


# ---- data, as run_ner.py and run_qa.py prepare them -------------------------------------------------------------

def ner_features(tok, examples, label2id=None):
    """input_ids, token_type_ids, and (with label2id) labels on the first piece of each word; word_ids for scoring."""
    out = []
    for e in examples:
        enc = tok(e["tokens"], is_split_into_words=True, truncation=True)
        word_ids = enc.word_ids()
        f = {"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"], "word_ids": word_ids}
        if label2id is not None:
            labels, prev = [], None
            for w in word_ids:
                labels.append(-100 if w is None or w == prev else label2id[e["tags"][w]])
                prev = w
            f["labels"] = labels
        out.append(f)
    return out


def qa_features(tok, examples, train_mode):
    """run_qa's prepare_train_features / prepare_validation_features: windows padded to max_length."""
    enc = tok([e["question"].lstrip() for e in examples], [e["context"] for e in examples], truncation="only_second",
              max_length=args.max_length, stride=args.doc_stride, return_overflowing_tokens=True,
              return_offsets_mapping=True, padding="max_length")
    out = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        ids = enc["input_ids"][i]
        seq = enc.sequence_ids(i)
        ex = enc["overflow_to_sample_mapping"][i]
        f = {"input_ids": ids, "token_type_ids": enc["token_type_ids"][i], "attention_mask": enc["attention_mask"][i],
             "example": ex}
        if train_mode:
            cls = ids.index(tok.cls_token_id)
            ans = examples[ex]["answers"]
            start = end = cls
            if ans["answer_start"]:
                s_char = ans["answer_start"][0]
                e_char = s_char + len(ans["text"][0])
                ts = 0
                while seq[ts] != 1:
                    ts += 1
                te = len(ids) - 1
                while seq[te] != 1:
                    te -= 1
                if offsets[ts][0] <= s_char and offsets[te][1] >= e_char:
                    # run_qa's walk, stopped at the context's end (run_qa's own runs into [SEP] and the padding,
                    # whose offsets are (0, 0), when the answer starts at the last context token; bertgpu stops)
                    while ts <= te and offsets[ts][0] <= s_char:
                        ts += 1
                    start = ts - 1
                    while offsets[te][1] >= e_char:
                        te -= 1
                    end = te + 1
            f["start_positions"], f["end_positions"] = start, end
        else:
            f["offset_mapping"] = [o if seq[k] == 1 else None for k, o in enumerate(offsets)]
        out.append(f)
    return out


def collate(features, pad_id):
    """Pads to the longest row (QA's rows are all max_length already); labels padded with -100."""
    t = max(len(f["input_ids"]) for f in features)
    pad = lambda key, v: [f[key] + [v] * (t - len(f[key])) for f in features]
    batch = {"input_ids": torch.tensor(pad("input_ids", pad_id)), "token_type_ids": torch.tensor(pad("token_type_ids", 0)),
             "attention_mask": torch.tensor([[1] * len(f["input_ids"]) + [0] * (t - len(f["input_ids"]))
                                             for f in features])}
    if "attention_mask" in features[0]:
        batch["attention_mask"] = torch.tensor(pad("attention_mask", 0))
    if "labels" in features[0]:
        batch["labels"] = torch.tensor(pad("labels", -100))
    if "start_positions" in features[0]:
        batch["start_positions"] = torch.tensor([f["start_positions"] for f in features])
        batch["end_positions"] = torch.tensor([f["end_positions"] for f in features])
    return batch


# ---- PyTorch fine-tuning: the recipe bertgpu implements (src/training/fit/) -------------------------------------

def torch_finetune(seed):
    torch.manual_seed(seed)
    nodrop = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if args.task == "ner":
        labels = sorted({t for e in train for t in e["tags"]})
        model = BertForTokenClassification.from_pretrained(
            MODEL, num_labels=len(labels), id2label=dict(enumerate(labels)),
            label2id={l: i for i, l in enumerate(labels)}, **nodrop)
        feats = ner_features(tok, train, model.config.label2id)
    else:
        model = BertForQuestionAnswering.from_pretrained(MODEL, **nodrop)
        feats = qa_features(tok, train, True)
    no_decay = lambda n: n.endswith("bias") or "LayerNorm.weight" in n
    groups = [{"params": [p for n, p in model.named_parameters() if not no_decay(n)], "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters() if no_decay(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr)
    steps = args.epochs * math.ceil(len(feats) / BATCH)
    sched = get_linear_schedule_with_warmup(opt, math.ceil(0.1 * steps - 1e-6), steps)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(args.epochs):
        order = torch.randperm(len(feats), generator=g).tolist()
        for i in range(0, len(order), BATCH):
            batch = collate([feats[j] for j in order[i:i + BATCH]], tok.pad_token_id)
            loss = model(**batch).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
    model.eval()
    return model


def bertgpu_finetune(seed, out):
    cmd = [BIN, "fine-tune", "--task", args.task, "--model", MODEL, "--data", os.path.join(DATA, "train.jsonl"),
           "--out", out, "--epochs", str(args.epochs), "--lr", str(args.lr), "--batch-size", str(BATCH),
           "--warmup", "0.1", "--weight-decay", "0.01", "--validation-split", "0", "--seed", str(seed), "--device", "cpu",
           "--no-dropout"]
    if args.task == "qa":
        cmd += ["--max-length", str(args.max_length), "--doc-stride", str(args.doc_stride)]
    subprocess.run(cmd, capture_output=True, check=True, env={**os.environ, "XDG_RUNTIME_DIR": "/tmp"})
    cls = BertForTokenClassification if args.task == "ner" else BertForQuestionAnswering
    return cls.from_pretrained(out).eval()


# ---- the one evaluation both models go through ----------------------------------------------------------------------

@torch.no_grad()
def score_ner(model):
    feats = ner_features(tok, test)
    pred = []
    for i in range(0, len(feats), 32):
        chunk = feats[i:i + 32]
        logits = model(**{k: v for k, v in collate(chunk, tok.pad_token_id).items()}).logits.argmax(-1).tolist()
        for f, row, e in zip(chunk, logits, test[i:i + 32]):
            tags, prev = ["O"] * len(e["tokens"]), None
            for k, w in enumerate(f["word_ids"]):
                if w is not None and w != prev:
                    tags[w] = model.config.id2label[row[k]]
                prev = w
            pred.append(tags)
    return {"f1": 100 * f1_score([e["tags"] for e in test], pred)}


def normalize_answer(s):
    """SQuAD's: lower case, no punctuation, no articles, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def squad_f1(gold, pred):
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not g or not p:
        return float(g == p)
    common = sum((collections.Counter(g) & collections.Counter(p)).values())
    if common == 0:
        return 0.0
    prec, rec = common / len(p), common / len(g)
    return 2 * prec * rec / (prec + rec)


@torch.no_grad()
def score_qa(model, n_best=20, max_answer_length=30):
    feats = qa_features(tok, test, False)
    start_all, end_all = [], []
    for i in range(0, len(feats), 32):
        out = model(**collate(feats[i:i + 32], tok.pad_token_id))
        start_all += out.start_logits.tolist()
        end_all += out.end_logits.tolist()
    by_example = collections.defaultdict(list)
    for k, f in enumerate(feats):
        by_example[f["example"]].append(k)
    em = f1 = 0.0
    for ex, e in enumerate(test):
        best_null, best = None, None
        for k in by_example[ex]:
            s, t, offsets = np.array(start_all[k]), np.array(end_all[k]), feats[k]["offset_mapping"]
            null = s[0] + t[0]
            if best_null is None or null < best_null:
                best_null = null
            for a in np.argsort(s)[-1:-n_best - 1:-1].tolist():
                for b in np.argsort(t)[-1:-n_best - 1:-1].tolist():
                    if a >= len(offsets) or b >= len(offsets) or offsets[a] is None or offsets[b] is None:
                        continue
                    if b < a or b - a + 1 > max_answer_length:
                        continue
                    sc = s[a] + t[b]
                    if best is None or sc > best[0]:
                        best = (sc, e["context"][offsets[a][0]:offsets[b][1]])
        pred = "" if best is None or best_null > best[0] else best[1]
        golds = [x for x in e["answers"]["text"] if normalize_answer(x)] or [""]
        em += max(float(normalize_answer(g) == normalize_answer(pred)) for g in golds)
        f1 += max(squad_f1(g, pred) for g in golds)
    return {"exact": 100 * em / len(test), "f1": 100 * f1 / len(test)}


score = score_ner if args.task == "ner" else score_qa
metrics = ["f1"] if args.task == "ner" else ["exact", "f1"]
print(f"all-MiniLM-L6-v2, {args.task} on {os.path.relpath(DATA, ROOT)} ({len(train)} train / {len(test)} test), "
      f"{args.epochs} epochs, lr {args.lr}, batch {BATCH}" +
      (f", windows {args.max_length}/{args.doc_stride}" if args.task == "qa" else "") + f", seeds {args.first_seed}..{args.first_seed + args.seeds - 1}",
      flush=True)
results = {"PyTorch": [], "bertgpu": []}
for seed in range(args.first_seed, args.first_seed + args.seeds):
    results["PyTorch"].append(score(torch_finetune(seed)))
    with tempfile.TemporaryDirectory() as d:
        results["bertgpu"].append(score(bertgpu_finetune(seed, d)))
    print(f"seed {seed}: " + "; ".join(f"{side} " + ", ".join(f"{m} {r[-1][m]:.2f}" for m in metrics)
                                      for side, r in results.items()), flush=True)
print("| metric | run | per seed | mean |")
print("|---|---|---|---|")
for m in metrics:
    for side, r in results.items():
        print(f"| {m} | {side} | {', '.join(f'{x[m]:.1f}' for x in r)} | {statistics.mean(x[m] for x in r):.2f} |")
    diff = [b[m] - a[m] for a, b in zip(results["PyTorch"], results["bertgpu"])]
    print(f"| {m} | bertgpu − PyTorch | {', '.join(f'{x:+.1f}' for x in diff)} | {statistics.mean(diff):+.2f} |")
