#!/usr/bin/env bash
# A fine-tuning step per family against BERT's of the same shape (issue bar: at most 1.3×). The checkpoints come from
# `bench/family_shapes.py DIR`; each round runs `examples/train_bench` (one AdamW step of sequence classification over
# every parameter, median of STEPS) on every family in turn, and prints each family's time over BERT's in that round;
# at the end, the median over rounds. A benchmark, not a test: run it on a quiet machine.
#   bench/train_families.sh DIR [cpu|gpu] [ROUNDS] [BATCH] [SEQ] [STEPS]
# gpu: the adapter's default kernels (`train_bench`'s first GPU row; the calibrated row is not run). FAMILIES="bert gte"
# (BERT first): a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/train_families.sh DIR [cpu|gpu] [ROUNDS] [BATCH] [SEQ] [STEPS]}
backend=${2:-cpu}; rounds=${3:-3}; batch=${4:-8}; seq=${5:-64}; steps=${6:-5}
families=${FAMILIES:-bert distilbert roberta albert electra mpnet deberta modernbert nomic gte jina}
cargo build --release --locked --quiet --example train_bench
bin=target/release/examples/train_bench
case "$backend" in
  cpu) env_vars=(CPU=1 GPU=0) ;;
  gpu) env_vars=(CPU=0 GPU=1 TUNING=default) ;;
  *) echo "backend is cpu or gpu" >&2; exit 2 ;;
esac
results=$(mktemp)
for r in $(seq "$rounds"); do
  for f in $families; do
    ms=$(env "${env_vars[@]}" "$bin" "$dir/$f" "$batch" "$seq" "$steps" | head -1 \
      | sed -n 's/.*"ms_per_step": \([0-9.]*\).*/\1/p')
    echo "$r $f $ms" | tee -a "$results" >&2
  done
done
python3 - "$results" "$families" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
fams = sys.argv[2].split()
ms = {(int(r), f): float(m) for r, f, m in rows}
rounds = sorted({r for r, _ in ms})
print("| family | ms (median) | ÷ BERT, each round | ÷ BERT (median) |")
print("|---|---|---|---|")
for f in fams:
    ratios = [ms[r, f] / ms[r, "bert"] for r in rounds]
    print(f"| {f} | {statistics.median(ms[r, f] for r in rounds):.1f} | "
          f"{', '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(ratios):.2f} |")
PY
rm -f "$results"
