"""What a checkpoint costs (BENCHMARKS.md, "Checkpoints"): `bertgpu fine-tune --checkpoint-every K` on a model, each
stderr progress line timestamped as it arrives. A step's time is the gap between two step lines with no checkpoint
between them; a checkpoint's is the gap between the step line before it and its `saved` line (reading the state
back, the safetensors and SHA-256, writing and syncing the files, the rename). The overhead at the default interval
(src/training/fit/checkpoint.rs DEFAULT_EVERY) is one checkpoint's time over that many steps' time.

    cargo build --release --locked --bin bertgpu
    python3 bench/checkpoint_cost.py [MODEL_DIR ...] [--data FILE.jsonl] [--batch-size 16] [--steps 24] [--every 2]

Defaults: models/all-MiniLM-L6-v2 and tests/models/tiny-classifier, tests/data/fortunes-large/train.jsonl. Needs only
Python's standard library. BERTGPU_BIN: another binary than target/release/bertgpu."""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BERTGPU_BIN", os.path.join(ROOT, "target/release/bertgpu"))
DEFAULT_EVERY = int(re.search(r"pub const DEFAULT_EVERY: usize = (\d+);",
                              open(os.path.join(ROOT, "src/training/fit/checkpoint.rs")).read()).group(1))

ap = argparse.ArgumentParser()
ap.add_argument("models", nargs="*", default=["models/all-MiniLM-L6-v2", "tests/models/tiny-classifier"])
ap.add_argument("--data", default="tests/data/fortunes-large/train.jsonl")
ap.add_argument("--batch-size", type=int, default=16)
ap.add_argument("--steps", type=int, default=24, help="examples used: steps x batch size (one epoch)")
ap.add_argument("--every", type=int, default=2, help="checkpoint interval of the measured run")
ap.add_argument("--device", default="cpu")
args = ap.parse_args()

lines = open(os.path.join(ROOT, args.data)).read().splitlines()[: args.steps * args.batch_size]
print(f"| model | checkpoint size | one checkpoint (median ms) | one step (median ms, batch {args.batch_size}) "
      f"| overhead at every {DEFAULT_EVERY} steps |")
print("|---|---|---|---|---|")
for model in args.models:
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "train.jsonl")
        open(data, "w").write("\n".join(lines) + "\n")
        cmd = [BIN, "fine-tune", "--task", "classify", "--model", os.path.join(ROOT, model), "--data", data,
               "--out", os.path.join(tmp, "out"), "--epochs", "1", "--batch-size", str(args.batch_size),
               "--validation-split", "0", "--device", args.device, "--checkpoint-dir", os.path.join(tmp, "ckpt"),
               "--checkpoint-every", str(args.every)]
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                             env={**os.environ, "XDG_RUNTIME_DIR": "/tmp"})
        events = []
        for line in p.stderr:
            if line.startswith("{"):
                events.append((time.monotonic(), json.loads(line)))
        if p.wait() != 0:
            raise SystemExit(f"{' '.join(cmd)} failed")
    steps, saves, sizes = [], [], []
    for (t0, a), (t1, b) in zip(events, events[1:]):
        if "step" in a and "loss" in a and "loss" in b and a["step"] > 1:
            steps.append((t1 - t0) * 1e3)
        if "loss" in a and b.get("checkpoint") == "saved":
            saves.append((t1 - t0) * 1e3)
            sizes.append(b["bytes"])
    save, step = statistics.median(saves), statistics.median(steps)
    print(f"| {os.path.basename(model)} | {statistics.median(sizes) / 1e6:.1f} MB | {save:.0f} | {step:.0f} "
          f"| {100 * save / (DEFAULT_EVERY * step):.2f}% |")
