#!/usr/bin/env bash
# CPU embeddings/second of bertgpu vs PyTorch (both on 2 threads), side by side in one run, on all-MiniLM-L6-v2.
#   bench/cpu_vs_torch.sh [batch=8] [seq=128] [iters=20] [rounds=3]
# Needs: ./models (scripts/fetch-models.sh) and a Python with torch + transformers (PYTHON=..., default python3).
# PROFILE=dev uses the dev profile (deps at opt-level 3, this crate at 2) instead of a release build.
# The two run alternately for `rounds` rounds so that background load hits both alike; the ratio uses the best
# median of each.
set -euo pipefail
cd "$(dirname "$0")/.."
batch=${1:-8} seq=${2:-128} iters=${3:-20} rounds=${4:-3}
PYTHON=${PYTHON:-python3}
model=models/all-MiniLM-L6-v2
profile=${PROFILE:-release}
cargo build --profile "$profile" --example cpu_bench >&2
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
export RAYON_NUM_THREADS=2
out=$(mktemp)
for _ in $(seq "$rounds"); do
  "target/$dir/examples/cpu_bench" "$model" "$batch" "$seq" "$iters" | tee -a "$out"
  "$PYTHON" bench/torch_cpu.py "$model" "$batch" "$seq" "$iters" 2 | tee -a "$out"
done
"$PYTHON" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
best = {}
for r in rows:
    k = "bertgpu" if r["impl"].startswith("bertgpu") else "pytorch"
    best[k] = min(best.get(k, 1e9), r["median_ms"])
b, t = best["bertgpu"], best["pytorch"]
n = rows[0]["batch"]
print(f"batch {n} x {rows[0]['seq']} tokens: bertgpu-cpu {b:.1f} ms ({n / b * 1e3:.1f} emb/s), "
      f"pytorch {t:.1f} ms ({n / t * 1e3:.1f} emb/s); bertgpu/pytorch throughput ratio {t / b:.2f}")
PY
rm -f "$out"
