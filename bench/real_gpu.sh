#!/usr/bin/env bash
# The real-GPU run (BENCHMARKS.md, "A real GPU"): on a machine with a GPU, a Vulkan driver and PyTorch with CUDA, but
# no Rust toolchain and no network. The binaries are built elsewhere and brought along in BIN:
#
#   cargo build --release --locked --bin bertgpu --example gpu_bench --example train_bench
#   cargo test --locked --no-run --test gpu_kernels ...     # GPU test binaries, copied (stripped) into BIN/tests/
#   bench/real_gpu.sh BIN [OUT]      BIN: bertgpu, gpu_bench, train_bench, tests/*, tokenizer/ (MiniLM's files)
#
# It prints, for all-MiniLM-L6-v2's shape and bert-base's (seeded random weights: speed depends on shapes alone):
# `bertgpu bench` at (a) 1 × 12, (b) 8 × 128, (c) 32 × 32, the calibrated kernels against the defaults, with each
# kernel's GPU time and the calibration's every variant (a, b), PyTorch CUDA f32 on the same
# batches, the matmul's GFLOP/s per workgroup shape, a fine-tuning step against PyTorch's, our GPU embeddings'
# cosine with PyTorch's, and the GPU tests on this adapter.
set -u
BIN=$(realpath "${1:?usage: bench/real_gpu.sh BIN [OUT]}")
OUT=${2:-/tmp/real_gpu}
M=$OUT/models
mkdir -p "$M"
export PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1
py() { python3 bench/real_gpu.py "$@" 2> >(grep -v "Loading weights\|Writing model\|LOAD REPORT\|MISSING\|^Key\|^---\|^Notes\|newly init\|^$" >&2); }
step() { echo; echo "### $*"; }

step adapter
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader
py models "$M" "$BIN/tokenizer"

for model in minilm base; do
  for shape in "1 12" "8 128" "32 32"; do
    set -- $shape
    step "bench $model $1 × $2"
    # The calibrated kernels (the first row) against the defaults (the second), round-robin.
    "$BIN/bertgpu" bench --model "$M/$model" --device gpu --batch "$1" --seq "$2" --reps 30 \
      --tuning matmul=direct:8x8 $([ "$1" != 32 ] && echo --profile)
    py forward "$M/$model" "$1" "$2" 30
  done
done

step "matmul GFLOP/s by workgroup shape (BERT shapes)"
REPS=20 WGS=8x8,16x4,32x4,t8x8,t16x8,t8x16,t16x16 "$BIN/gpu_bench" matmul

step "fine-tuning step, batch 16 × 64"
for model in minilm base; do
  GPU=1 "$BIN/train_bench" "$M/$model" 16 64 5 | grep gpu
  py train "$M/$model" 16 64 5
done

step "our GPU embeddings against PyTorch (float64 reference)"
printf '%s\n' "Hello world." "The cat sat on the mat while the dog slept by the door." \
  "A GPU runs thousands of threads at once, and BERT's matrix products keep them busy." \
  "Where is the nearest train station?" "$(printf 'a long line of repeated words %.0s' $(seq 1 40))" \
  "Naïve café owners in Zürich serve crème brûlée." > "$OUT/texts.txt"
for model in minilm base; do
  "$BIN/bertgpu" embed --model "$M/$model" --device gpu < "$OUT/texts.txt" > "$OUT/ours_$model.jsonl" && py compare "$M/$model" "$OUT/texts.txt" "$OUT/ours_$model.jsonl"
done

step "GPU tests on this adapter"
# The test binaries find tests/models through the path they were built in.
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
for t in "$BIN"/tests/*; do
  echo "-- $(basename "$t")"
  BERTGPU_REQUIRE_GPU=1 "$t" --test-threads 4 2>&1 | grep -E "^test result|FAILED|panicked|SKIPPED" | head -8
done
