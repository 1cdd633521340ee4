#!/usr/bin/env bash
# The rotary families' forward against a BERT of the same shape, on the CPU backend and the GPU (lavapipe here),
# side by side: ROUNDS rounds, each running `bertgpu bench` on the BERT, the NomicBERT, the GTE and the ModernBERT
# of bench/rotary_shapes.py in turn (so the four see the same machine load), then the median over rounds of each
# family's time over BERT's time in the same round. A benchmark, not a test: the machine is noisy.
#
#   /path/to/venv/bin/python bench/rotary_shapes.py /tmp/rotbench
#   bench/rotary_speed.sh /tmp/rotbench [ROUNDS] [BATCH] [SEQ]
set -euo pipefail
dir=${1:-/tmp/rotbench}; rounds=${2:-3}; batch=${3:-4}; seq=${4:-64}
bin=${BERTGPU_BIN:-target/debug/bertgpu}
cargo build --locked --bin bertgpu >&2
out=$(mktemp)
for r in $(seq "$rounds"); do
  for fam in bert nomic gte modernbert; do
    "$bin" bench --model "$dir/$fam" --batch "$batch" --seq "$seq" --reps 3 --device auto 2>/dev/null \
      | awk -v r="$r" -v f="$fam" -F'|' '/^\| (cpu|gpu)/ { split($2, b, " "); print r, f, b[1], $3 + 0 }' >> "$out"
  done
done
python3 - "$out" "$batch" "$seq" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
ms = {(r, f, b): float(t) for r, f, b, t in rows}
print(f"batch {sys.argv[2]} × {sys.argv[3]} tokens; median over rounds of time / BERT's time in the same round")
print("| backend | family | ms (median) | / BERT |")
print("|---|---|---|---|")
for b in ("cpu", "gpu"):
    for f in ("bert", "nomic", "gte", "modernbert"):
        rs = sorted({r for r, ff, bb in ms if ff == f and bb == b})
        if not rs:
            continue
        ratio = statistics.median(ms[(r, f, b)] / ms[(r, "bert", b)] for r in rs if (r, "bert", b) in ms)
        print(f"| {b} | {f} | {statistics.median(ms[(r, f, b)] for r in rs):.1f} | {ratio:.3f} |")
PY
rm -f "$out"
