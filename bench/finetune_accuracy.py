"""Fine-tuning accuracy, bertgpu against PyTorch (BENCHMARKS.md, "Fine-tuning"): all-MiniLM-L6-v2 fine-tuned as a
sequence classifier on DATA/train.jsonl, evaluated on DATA/test.jsonl (default DATA: tests/data/fortunes, 128
quotations in 4 topics, test set 32; tests/data/fortunes-large: 440 in 8 topics, test set 440), with
the same recipe on both sides: every parameter, AdamW (weight decay 0.01, none on biases and LayerNorm weights), linear
warm-up over 10% of the steps then linear decay, gradients clipped at 1.0, batch 16, dropout off (bertgpu does not
apply dropout yet), a new classifier from N(0, 0.02) (the checkpoint has a pooler, no classifier). Each side runs several
seeds (shuffle order and new-head initialisation); the table gives the mean test accuracy. bertgpu's `train-head` on
the same data is the frozen-encoder baseline.

    cargo build --release --bin bertgpu
    python bench/finetune_accuracy.py [epochs 5] [lr 1e-4] [seeds 3] [DATA tests/data/fortunes]

Needs torch and transformers. Runs bertgpu's CLI on the CPU (BERTGPU_BIN: another binary than
target/release/bertgpu); PyTorch on TORCH_THREADS threads (default 2)."""
import json, os, statistics, subprocess, sys, tempfile

import torch
from transformers import AutoTokenizer, BertForSequenceClassification, get_linear_schedule_with_warmup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models/all-MiniLM-L6-v2")
BIN = os.environ.get("BERTGPU_BIN", os.path.join(ROOT, "target/release/bertgpu"))
ENV = {**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))


def read(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def labels_of(rows):
    """The labels in order of first appearance (the class index PyTorch's head is trained on)."""
    out = []
    for e in rows:
        if e["label"] not in out:
            out.append(e["label"])
    return out


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, env=ENV, **kw)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.decode()[-4000:])
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return p


def optimizer(model, lr, steps):
    """The recipe's AdamW (weight decay 0.01, none on the biases and norm weights: the 1-D parameters) and its
    schedule (linear warm-up over 10% of the steps, then linear decay)."""
    groups = [{"params": [p for p in model.parameters() if p.ndim >= 2], "weight_decay": 0.01},
              {"params": [p for p in model.parameters() if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr)
    return opt, get_linear_schedule_with_warmup(opt, int(0.1 * steps + 0.999), steps)


def train(model, rows, epochs, lr, seed, loss_of):
    """The recipe's training loop: `epochs` passes over `rows` in batches of 16, shuffled by a generator seeded with
    `seed`; `loss_of(batch)` is a batch's loss; gradients clipped at 1.0, then the AdamW step and the schedule's."""
    steps = epochs * ((len(rows) + 15) // 16)
    opt, sched = optimizer(model, lr, steps)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(rows), generator=g).tolist()
        for i in range(0, len(order), 16):
            loss = loss_of([rows[j] for j in order[i:i + 16]])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()


def torch_run(train_path, test_path, epochs, lr, seed):
    """PyTorch's fine-tune with the recipe above; the test accuracy."""
    rows, test = read(train_path), read(test_path)
    labels = labels_of(rows)
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = BertForSequenceClassification.from_pretrained(MODEL, num_labels=len(labels), hidden_dropout_prob=0.0,
                                                          attention_probs_dropout_prob=0.0)

    def loss_of(chunk):
        enc = tok([e["text"] for e in chunk], truncation=True, padding=True, return_tensors="pt")
        return model(**enc, labels=torch.tensor([labels.index(e["label"]) for e in chunk])).loss

    train(model, rows, epochs, lr, seed, loss_of)
    model.eval()
    with torch.no_grad():
        enc = tok([e["text"] for e in test], truncation=True, padding=True, return_tensors="pt")
        pred = model(**enc).logits.argmax(-1).tolist()
    return sum(labels[p] == e["label"] for p, e in zip(pred, test)) / len(test)


def classify(test_path, model_dir, extra=()):
    """`bertgpu classify`'s accuracy on test_path."""
    test = read(test_path)
    inp = "".join(json.dumps({"text": e["text"]}) + "\n" for e in test)
    out = run([BIN, "classify", "--model", model_dir, "--device", "cpu", *extra], input=inp.encode())
    preds = [json.loads(l)[0]["label"] for l in out.stdout.decode().splitlines()]
    assert len(preds) == len(test)
    return sum(p == e["label"] for p, e in zip(preds, test)) / len(test)


def ours(train_path, test_path, epochs, lr, seed):
    """bertgpu's `fine-tune` with the recipe above; the test accuracy."""
    with tempfile.TemporaryDirectory() as d:
        run([BIN, "fine-tune", "--task", "classify", "--model", MODEL, "--data", train_path, "--out", d,
             "--epochs", str(epochs), "--lr", str(lr), "--batch-size", "16", "--warmup", "0.1", "--weight-decay", "0.01",
             "--validation-split", "0", "--seed", str(seed), "--device", "cpu", "--no-dropout"])
        return classify(test_path, d)


def head(train_path, test_path, epochs, lr, seed):
    """bertgpu's `train-head` (frozen encoder); epochs and lr None: its defaults."""
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "head.safetensors")
        opts = (["--epochs", str(epochs)] if epochs else []) + (["--lr", str(lr)] if lr else [])
        run([BIN, "train-head", "--model", MODEL, "--data", train_path, "--out", f, "--seed", str(seed),
             "--device", "cpu", *opts])
        return classify(test_path, MODEL, ["--head", f])


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    lr = float(sys.argv[2]) if len(sys.argv) > 2 else 1e-4
    seeds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    data = os.path.join(ROOT, sys.argv[4] if len(sys.argv) > 4 else "tests/data/fortunes")
    train, test = os.path.join(data, "train.jsonl"), os.path.join(data, "test.jsonl")
    rows = [("PyTorch fine-tune", lambda s: torch_run(train, test, epochs, lr, s)),
            ("bertgpu fine-tune", lambda s: ours(train, test, epochs, lr, s)),
            ("bertgpu train-head (frozen encoder)", lambda s: head(train, test, None, None, s))]
    print(f"all-MiniLM-L6-v2 on {os.path.relpath(data, ROOT)} ({len(read(train))} train / {len(read(test))} test), "
          f"{epochs} epochs, lr {lr}, batch 16, seeds 0..{seeds - 1}")
    print("| run | test accuracy per seed | mean |")
    print("|---|---|---|")
    for name, fn in rows:
        accs = [fn(s) for s in range(seeds)]
        print(f"| {name} | {', '.join(f'{a:.3f}' for a in accs)} | {statistics.mean(accs):.3f} |", flush=True)


if __name__ == "__main__":
    main()
