"""Fine-tuning recipe chosen on validation, then measured on test (issue 21's classification bar: bertgpu's fine-tune
within 1.5 points of PyTorch's with the same recipe, and above `train-head` on the same data).

bench/finetune_accuracy.py compares the three runs with one fixed recipe; with 3 epochs at lr 1e-4 on
tests/data/fortunes-large (84 steps) neither fine-tune beat train-head's defaults. This script asks whether that is
the recipe: it never looks at test while choosing.

 1. DATA/train.jsonl is split into a fixed, stratified 80/20 train/validation split (per label, shuffled by
    random.Random(0), the first round(20%) to validation), written to WORK/split/.
 2. On that split, seed 0: bertgpu `fine-tune --task classify` over lr {3e-5, 5e-5, 1e-4, 2e-4} x epochs {3, 6, 10}
    (batch 16, --warmup 0.1, --weight-decay 0.01, --no-dropout, --validation-split 0, --device cpu, as in
    finetune_accuracy.py), and bertgpu `train-head` over lr {1e-3, 3e-3, 1e-2} x epochs {20, 50} (its other settings
    at their defaults, as in finetune_accuracy.py, so it still holds out 10% of what it is given for early stopping);
    each scored on the validation split with `bertgpu classify`.
 3. The best recipe of each by validation accuracy (ties: fewer epochs, then lower lr).
 4. With those recipes, trained on the full DATA/train.jsonl and scored on DATA/test.jsonl, seeds 0..SEEDS-1:
    PyTorch's BertForSequenceClassification fine-tune (the fine-tune recipe; the same code as finetune_accuracy.py),
    bertgpu's fine-tune, bertgpu's train-head.

Prints markdown tables (validation grid, chosen recipes, test per seed and mean) and wall time per stage. Every run's
result is stored in WORK/results.json as it finishes, so a second invocation with the same WORK resumes where the first
stopped (delete WORK to start over).

    nice -n 19 env TORCH_THREADS=2 BERTGPU_BIN=target/release/bertgpu XDG_RUNTIME_DIR=/tmp \\
        python bench/finetune_recipe.py [--data tests/data/fortunes-large] [--work /tmp/bertgpu-recipe] [--seeds 3]

Needs torch and transformers. Runs bertgpu's CLI on the CPU (BERTGPU_BIN: another binary than
target/release/bertgpu); PyTorch on TORCH_THREADS threads (default 2)."""
import argparse, json, os, random, statistics, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The three runs, the same code as bench/finetune_accuracy.py's (which also sets torch's threads).
from finetune_accuracy import BIN, ROOT, head, labels_of, ours, read, torch_run  # noqa: E402
import torch  # noqa: E402

FT_LRS, FT_EPOCHS = [3e-5, 5e-5, 1e-4, 2e-4], [3, 6, 10]
HEAD_LRS, HEAD_EPOCHS = [1e-3, 3e-3, 1e-2], [20, 50]

ap = argparse.ArgumentParser()
ap.add_argument("--data", default="tests/data/fortunes-large")
ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "bertgpu-recipe"))
ap.add_argument("--seeds", type=int, default=3)
ap.add_argument("--ft-lrs", type=float, nargs="+", default=FT_LRS)
ap.add_argument("--ft-epochs", type=int, nargs="+", default=FT_EPOCHS)
ap.add_argument("--ft-skip", nargs="*", default=[], metavar="LR/EPOCHS",
                help="fine-tune grid cells not to run (e.g. 5e-5/10), to shrink the grid when the machine is slow")
args = ap.parse_args()
DATA = os.path.join(ROOT, args.data)
os.makedirs(args.work, exist_ok=True)
RESULTS = os.path.join(args.work, "results.json")
results = json.load(open(RESULTS)) if os.path.exists(RESULTS) else {}


def write(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in rows)


def split(rows, frac=0.2, seed=0):
    """Stratified: per label (in order of first appearance), shuffle that label's examples with random.Random(seed)
    and send the first round(frac * n) to validation; both halves keep the file's order."""
    rng = random.Random(seed)
    val_idx = set()
    for lab in labels_of(rows):
        idx = [i for i, e in enumerate(rows) if e["label"] == lab]
        rng.shuffle(idx)
        val_idx.update(idx[:round(frac * len(idx))])
    return [e for i, e in enumerate(rows) if i not in val_idx], [e for i, e in enumerate(rows) if i in val_idx]


def cached(key, fn, *a):
    """fn(*a) once per key; (accuracy, seconds), stored in WORK/results.json as soon as it is known."""
    if key not in results:
        t = time.time()
        acc = fn(*a)
        results[key] = {"acc": acc, "secs": time.time() - t}
        with open(RESULTS + ".tmp", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(RESULTS + ".tmp", RESULTS)
        print(f"  {key}: {acc:.4f} ({results[key]['secs']:.0f} s)", flush=True)
    return results[key]["acc"], results[key]["secs"]


def best(grid):
    """grid: {(lr, epochs): acc}; highest accuracy, ties to fewer epochs then lower lr."""
    return min(grid, key=lambda k: (-grid[k], k[1], k[0]))


full_train, full_test = os.path.join(DATA, "train.jsonl"), os.path.join(DATA, "test.jsonl")
tr, va = split(read(full_train))
sp = os.path.join(args.work, "split")
os.makedirs(sp, exist_ok=True)
write(os.path.join(sp, "train.jsonl"), tr)
write(os.path.join(sp, "validation.jsonl"), va)
sp_train, sp_val = os.path.join(sp, "train.jsonl"), os.path.join(sp, "validation.jsonl")
counts = lambda rows: ", ".join(f"{l} {sum(e['label'] == l for e in rows)}" for l in labels_of(rows))
print(f"all-MiniLM-L6-v2 on {args.data}; BERTGPU_BIN {BIN}; torch {torch.__version__} on {torch.get_num_threads()} threads")
print(f"split of train.jsonl ({len(tr) + len(va)}): {len(tr)} train ({counts(tr)}) / {len(va)} validation ({counts(va)})"
      f", in {sp}; results cached in {RESULTS}", flush=True)

stage_secs = {}
print("\nvalidation grid, bertgpu fine-tune (seed 0):", flush=True)
ft_grid, s = {}, 0.0
skip = {(float(c.split("/")[0]), int(c.split("/")[1])) for c in args.ft_skip}
for ep in args.ft_epochs:
    for lr in args.ft_lrs:
        if (lr, ep) in skip:
            continue
        ft_grid[(lr, ep)], t = cached(f"val/fine-tune/lr={lr:g}/epochs={ep}/seed=0", ours, sp_train, sp_val, ep, lr, 0)
        s += t
stage_secs["validation grid: bertgpu fine-tune"] = s
print("validation grid, bertgpu train-head (seed 0):", flush=True)
head_grid, s = {}, 0.0
for ep in HEAD_EPOCHS:
    for lr in HEAD_LRS:
        head_grid[(lr, ep)], t = cached(f"val/train-head/lr={lr:g}/epochs={ep}/seed=0", head, sp_train, sp_val, ep, lr, 0)
        s += t
stage_secs["validation grid: bertgpu train-head"] = s


def grid_table(title, grid, lrs, eps):
    print(f"\n{title} (validation accuracy, {len(va)} examples, seed 0)\n")
    print("| epochs \\ lr | " + " | ".join(f"{lr:g}" for lr in lrs) + " |")
    print("|---|" + "---|" * len(lrs))
    for ep in eps:
        print(f"| {ep} | " + " | ".join(f"{grid[(lr, ep)]:.3f}" if (lr, ep) in grid else "not run" for lr in lrs) + " |")


grid_table("bertgpu fine-tune", ft_grid, args.ft_lrs, args.ft_epochs)
grid_table("bertgpu train-head", head_grid, HEAD_LRS, HEAD_EPOCHS)
ft_lr, ft_ep = best(ft_grid)
head_lr, head_ep = best(head_grid)
print(f"\nchosen: fine-tune lr {ft_lr:g}, {ft_ep} epochs (validation {ft_grid[(ft_lr, ft_ep)]:.3f}); "
      f"train-head lr {head_lr:g}, {head_ep} epochs (validation {head_grid[(head_lr, head_ep)]:.3f})", flush=True)

print(f"\ntest runs on the full train.jsonl, seeds 0..{args.seeds - 1}:", flush=True)
rows = [("PyTorch fine-tune", "pytorch", torch_run, ft_ep, ft_lr), ("bertgpu fine-tune", "fine-tune", ours, ft_ep, ft_lr),
        ("bertgpu train-head (frozen encoder)", "train-head", head, head_ep, head_lr)]
table = []
for name, tag, fn, ep, lr in rows:
    accs, s = [], 0.0
    for seed in range(args.seeds):
        a, t = cached(f"test/{tag}/lr={lr:g}/epochs={ep}/seed={seed}", fn, full_train, full_test, ep, lr, seed)
        accs.append(a)
        s += t
    stage_secs[f"test: {name}"] = s
    table.append((f"{name}, lr {lr:g}, {ep} epochs", accs))

print(f"\ntest accuracy ({len(read(full_test))} examples), recipes chosen on validation\n")
print("| run | test accuracy per seed | mean |")
print("|---|---|---|")
for name, accs in table:
    print(f"| {name} | {', '.join(f'{a:.3f}' for a in accs)} | {statistics.mean(accs):.3f} |")
means = [statistics.mean(a) for _, a in table]
print(f"\nbertgpu fine-tune − PyTorch fine-tune: {100 * (means[1] - means[0]):+.1f} points; "
      f"bertgpu fine-tune − train-head: {100 * (means[1] - means[2]):+.1f} points")
print("\n| stage | wall time |\n|---|---|")
for k, v in stage_secs.items():
    print(f"| {k} | {v / 60:.1f} min |")
print(f"| total | {sum(stage_secs.values()) / 60:.1f} min |", flush=True)
