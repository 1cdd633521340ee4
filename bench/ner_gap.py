"""Does bertgpu's NER fine-tuning train on the same thing as PyTorch's? (BENCHMARKS.md, "Fine-tuning", token
classification: the gap between `bench/finetune_accuracy_tasks.py ner`'s two sides.)

    cargo build --release --example ner_trajectory
    target/release/examples/ner_trajectory models/all-MiniLM-L6-v2 tests/data/fortunes-attributions/ner/train.jsonl \
        /tmp/ner-gap --seed 0 --lr 1e-4 [--steps N] [--export]
    python bench/ner_gap.py /tmp/ner-gap [--lr 1e-4] [--score]

or, the other way round, bertgpu on PyTorch's randomness of a seed (torch_finetune's order and new classifier):

    python bench/ner_gap.py /tmp/ner-torch0 --torch-run 0
    target/release/examples/ner_trajectory models/all-MiniLM-L6-v2 tests/data/fortunes-attributions/ner/train.jsonl \
        /tmp/ner-torch0 --lr 1e-4 --order /tmp/ner-torch0/order.json --head /tmp/ner-torch0/head.json --export
    python bench/ner_gap.py /tmp/ner-torch0 --score

The example writes what bertgpu trains on for the seed (rows.json: its prepared rows; order.json: the rows of each
optimiser step, fit.rs's seeded order; head.json: the new classifier FineTuner::new draws; steps.json: bertgpu's loss
and gradient norm per step). This script

1. compares the rows with `finetune_accuracy_tasks.py`'s `ner_features` (run_ner's preparation) for every training
   example: input_ids, token_type_ids, and the label *names* (each side's class order mapped through its own list);
2. trains PyTorch's side (`torch_finetune`'s recipe: BertForTokenClassification without dropout, AdamW with decay 0.01
   except biases and LayerNorm weights, linear warm-up over ceil(10%) of the steps then decay, clipping at 1.0) on
   the *same* batches in the same order from the *same* initial classifier, for as many steps as steps.json holds,
   and prints both losses per step with their relative difference;
3. with --score (and the example's --export): scores both trained models on the test set with the benchmark's
   seqeval entity F1 and prints the mean training-set token loss of each.

Needs torch, transformers and seqeval (the benchmark's venv). PyTorch on TORCH_THREADS threads (default 2).
"""
import argparse
import json
import math
import os

import torch
from seqeval.metrics import classification_report, f1_score
from transformers import AutoTokenizer, BertForTokenClassification, get_linear_schedule_with_warmup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models/all-MiniLM-L6-v2")
torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))

ap = argparse.ArgumentParser()
ap.add_argument("dir", help="the output folder of examples/ner_trajectory.rs")
ap.add_argument("--data", default="tests/data/fortunes-attributions/ner")
ap.add_argument("--lr", type=float, default=1e-4)
ap.add_argument("--score", action="store_true", help="train every step and score both models on the test set")
ap.add_argument("--torch-run", type=int, metavar="SEED",
                help="only write PyTorch's order and initial classifier of SEED (torch_finetune's) into DIR as "
                     "order.json and head.json, for ner_trajectory's --order and --head")
ap.add_argument("--epochs", type=int, default=3)
args = ap.parse_args()

DATA = os.path.join(ROOT, args.data)
train = [json.loads(l) for l in open(os.path.join(DATA, "train.jsonl"))]
test = [json.loads(l) for l in open(os.path.join(DATA, "test.jsonl"))]
tok = AutoTokenizer.from_pretrained(MODEL)

if args.torch_run is not None:
    # torch_finetune(seed)'s randomness: the new classifier drawn after torch.manual_seed(seed), and one
    # torch.randperm per epoch from a generator seeded with seed, cut into batches of 16.
    seed = args.torch_run
    torch.manual_seed(seed)
    labels = sorted({t for e in train for t in e["tags"]})
    m = BertForTokenClassification.from_pretrained(MODEL, num_labels=len(labels), id2label=dict(enumerate(labels)),
                                                   label2id={l: i for i, l in enumerate(labels)})
    g = torch.Generator().manual_seed(seed)
    order = []
    for _ in range(args.epochs):
        perm = torch.randperm(len(train), generator=g).tolist()
        order += [perm[i:i + 16] for i in range(0, len(perm), 16)]
    os.makedirs(args.dir, exist_ok=True)
    json.dump(order, open(os.path.join(args.dir, "order.json"), "w"))
    json.dump({"weight": m.classifier.weight.detach().flatten().tolist(), "bias": m.classifier.bias.detach().tolist(),
               "labels": labels}, open(os.path.join(args.dir, "head.json"), "w"))
    print(f"wrote PyTorch's seed-{seed} order ({len(order)} steps) and classifier (std "
          f"{m.classifier.weight.std().item():.4f}) into {args.dir}")
    raise SystemExit

rs = json.load(open(os.path.join(args.dir, "rows.json")))
order = json.load(open(os.path.join(args.dir, "order.json")))
head = json.load(open(os.path.join(args.dir, "head.json")))
rust_steps = json.load(open(os.path.join(args.dir, "steps.json")))


def ner_features(examples, label2id=None):
    """finetune_accuracy_tasks.py's ner_features (run_ner's tokenize_and_align_labels), verbatim."""
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


def collate(features):
    """finetune_accuracy_tasks.py's collate for NER: padded to the longest row, labels padded with -100."""
    t = max(len(f["input_ids"]) for f in features)
    pad = lambda key, v: [f[key] + [v] * (t - len(f[key])) for f in features]
    batch = {"input_ids": torch.tensor(pad("input_ids", tok.pad_token_id)),
             "token_type_ids": torch.tensor(pad("token_type_ids", 0)),
             "attention_mask": torch.tensor([[1] * len(f["input_ids"]) + [0] * (t - len(f["input_ids"]))
                                             for f in features])}
    if "labels" in features[0]:
        batch["labels"] = torch.tensor(pad("labels", -100))
    return batch


# ---- 1. the prepared data -----------------------------------------------------------------------------------------
labels = sorted({t for e in train for t in e["tags"]})
label2id = {l: i for i, l in enumerate(labels)}
feats = ner_features(train, label2id)
name = lambda ls, ids: [None if i == -100 else ls[i] for i in ids]
bad = []
assert len(rs["rows"]) == len(feats), (len(rs["rows"]), len(feats))
for i, (r, f) in enumerate(zip(rs["rows"], feats)):
    for key in ("input_ids", "token_type_ids"):
        if r[key] != f[key]:
            bad.append((i, key))
    if name(rs["labels"], r["labels"]) != name(labels, f["labels"]):
        bad.append((i, "labels"))
print(f"1. rows: {len(feats)} examples, labels PyTorch {labels} / bertgpu {rs['labels']}, keep_head "
      f"{rs['keep_head']}; {len(bad)} differences {bad[:10]}")
n_lab = sum(l != -100 for f in feats for l in f["labels"])
print(f"   {sum(len(f['input_ids']) for f in feats)} tokens, {n_lab} labelled; longest row "
      f"{max(len(f['input_ids']) for f in feats)}")

# ---- 2. PyTorch on the example's batches, from its initial classifier ----------------------------------------------
# bertgpu's class k is rs["labels"][k]: PyTorch uses the same order here so that the head's rows carry over as they are.
blabels = rs["labels"]
bfeats = ner_features(train, {l: i for i, l in enumerate(blabels)})
model = BertForTokenClassification.from_pretrained(
    MODEL, num_labels=len(blabels), id2label=dict(enumerate(blabels)), label2id={l: i for i, l in enumerate(blabels)},
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
with torch.no_grad():
    model.classifier.weight.copy_(torch.tensor(head["weight"]).view(*head["shape"]))
    model.classifier.bias.copy_(torch.tensor(head["bias"]))
no_decay = lambda n: n.endswith("bias") or "LayerNorm.weight" in n
groups = [{"params": [p for n, p in model.named_parameters() if not no_decay(n)], "weight_decay": 0.01},
          {"params": [p for n, p in model.named_parameters() if no_decay(n)], "weight_decay": 0.0}]
opt = torch.optim.AdamW(groups, lr=args.lr)
steps = len(order)
sched = get_linear_schedule_with_warmup(opt, math.ceil(0.1 * steps - 1e-6), steps)
model.train()
run = len(rust_steps) if not args.score else steps
print(f"2. {run} of {steps} steps on order.json's batches from head.json's classifier, both sides "
      f"(warm-up {math.ceil(0.1 * steps - 1e-6)} steps)")
print("   step  lr(torch)   lr(bertgpu)  loss(torch)  loss(bertgpu)  rel.diff   gnorm(torch) gnorm(bertgpu)")
worst = 0.0
for s, idx in enumerate(order[:run]):
    batch = collate([bfeats[j] for j in idx])
    lr_now = sched.get_last_lr()[0]
    loss = model(**batch).loss
    opt.zero_grad()
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
    opt.step()
    sched.step()
    if s < len(rust_steps):
        r = rust_steps[s]
        rel = abs(loss.item() - r["loss"]) / abs(r["loss"])
        worst = max(worst, rel)
        print(f"   {s + 1:4d}  {lr_now:.4e}  {r['lr']:.4e}   {loss.item():.6f}     {r['loss']:.6f}      {rel:.1e}    "
              f"{gn:.5f}      {r['grad_norm']:.5f}")
print(f"   largest relative loss difference: {worst:.2e}")


# ---- 3. the trained models on the test set -------------------------------------------------------------------------
@torch.no_grad()
def score(m):
    """The benchmark's score_ner: the first piece of each word predicts its tag; seqeval entity F1."""
    m.eval()
    tf = ner_features(test)
    pred = []
    for i in range(0, len(tf), 32):
        chunk = tf[i:i + 32]
        logits = m(**collate(chunk)).logits.argmax(-1).tolist()
        for f, row, e in zip(chunk, logits, test[i:i + 32]):
            tags, prev = ["O"] * len(e["tokens"]), None
            for k, w in enumerate(f["word_ids"]):
                if w is not None and w != prev:
                    tags[w] = m.config.id2label[row[k]]
                prev = w
            pred.append(tags)
    gold = [e["tags"] for e in test]
    return 100 * f1_score(gold, pred), classification_report(gold, pred, digits=3)


@torch.no_grad()
def train_loss(m):
    """Mean token loss over the training set's labelled tokens (batches of 16 in file order)."""
    m.eval()
    ids = {l: i for i, l in m.config.id2label.items()}
    tf = ner_features(train, {l: ids[l] for l in labels})
    tot = n = 0
    for i in range(0, len(tf), 16):
        b = collate(tf[i:i + 16])
        k = (b["labels"] != -100).sum().item()
        tot += m(**b).loss.item() * k
        n += k
    return tot / n


if args.score:
    print("3. test entity F1 and mean training token loss")
    f1, rep = score(model)
    print(f"   PyTorch on order.json/head.json: F1 {f1:.2f}, train loss {train_loss(model):.4f}\n{rep}")
    if os.path.exists(os.path.join(args.dir, "model.safetensors")):
        bm = BertForTokenClassification.from_pretrained(args.dir)
        f1, rep = score(bm)
        print(f"   bertgpu (examples/ner_trajectory --export): F1 {f1:.2f}, train loss {train_loss(bm):.4f}\n{rep}")
