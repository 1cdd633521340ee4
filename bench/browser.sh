#!/usr/bin/env bash
# bertgpu vs transformers.js in one headless Chromium launch (bench/browser.mjs); prints a Markdown table.
#   bench/browser.sh [--reps 7] [--latency-reps 25] [--gpu-reps 3] [--cold 3] [--warmup-ms 5000] [--only cpu|webgpu] [--cores n] [--json out.json]
# Prepares what is missing: the npm package (scripts/build-wasm.sh), transformers.js (bench/package.json, installed
# with --ignore-scripts: onnxruntime-node's install script reaches for the network and is not used here), the ONNX
# export for transformers.js (bench/export_onnx.py: needs PYTHON with torch, transformers, onnx, onnxruntime; default
# .venv/bin/python), and our q8_0 GGUF (`bertgpu convert`). Nothing is downloaded from a model hub.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
scripts/fetch-models.sh
[ -f pkg/wasm/bertgpu_bg.wasm ] || scripts/build-wasm.sh
[ -d bench/node_modules/@huggingface/transformers ] || (cd bench && npm ci --ignore-scripts --no-audit --no-fund)
[ -f bench/models/all-MiniLM-L6-v2/onnx/model_quantized.onnx ] || "$PYTHON" bench/export_onnx.py
if [ ! -f bench/models/all-MiniLM-L6-v2.q8_0.gguf ]; then
  cargo build --release --bin bertgpu
  target/release/bertgpu convert --model models/all-MiniLM-L6-v2 --dtype q8_0 --out bench/models/all-MiniLM-L6-v2.q8_0.gguf
fi
exec node bench/browser.mjs "$@"
