#!/usr/bin/env bash
# Head-training quality on Debian's `fortunes` (BENCHMARKS.md): builds the dataset, trains a head with bertgpu on the
# CPU backend, classifies the held-out split with `classify --head`, prints the accuracy; then, if a python with torch
# is given as PYTHON, the PyTorch head trained the same way on the same frozen features.
#   bench/train_head_fortunes.sh [EPOCHS] [LR]        (PYTHON=/path/to/venv/bin/python for the torch side)
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${1:-30}
LR=${2:-1e-3}
DIR=${DIR:-/tmp/bertgpu-fortunes}
MODEL=models/all-MiniLM-L6-v2
python3 scripts/fortunes-dataset.py "$DIR"
cargo build --quiet --bin bertgpu
BIN=target/debug/bertgpu
$BIN train-head --model $MODEL --device cpu --data "$DIR/train.jsonl" --out "$DIR/head.safetensors" \
  --epochs "$EPOCHS" --lr "$LR" --seed 0 2> "$DIR/train.log"
tail -1 "$DIR/train.log"
$BIN classify --model $MODEL --device cpu --head "$DIR/head.safetensors" --top-k 1 < "$DIR/test.jsonl" > "$DIR/pred.jsonl"
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
gold = [json.loads(l)["label"] for l in open(f"{d}/test.jsonl")]
pred = [json.loads(l)[0]["label"] for l in open(f"{d}/pred.jsonl")]
print(json.dumps({"bertgpu_test_accuracy": round(sum(g == p for g, p in zip(gold, pred)) / len(gold), 4), "test": len(gold)}))
PY
if [ -n "${PYTHON:-}" ]; then
  "$PYTHON" bench/train_head_torch.py $MODEL "$DIR" --epochs "$EPOCHS" --lr "$LR" 2>/dev/null | tail -1
fi
