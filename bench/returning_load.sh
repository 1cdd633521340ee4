#!/usr/bin/env bash
# Wall time of a GPU load of all-MiniLM-L6-v2 with a cached kernel choice, against the old path (the defaults
# checked, then the choice set: what BERTGPU_TUNING still does) and the defaults alone, natively (BENCHMARKS.md, "A
# returning load checks only the kernels it runs"). Needs target/release/bertgpu and models/ (scripts/fetch-models.sh).
#   bench/returning_load.sh ICD SPEC RUNS
# ICD: ss (Chromium's SwiftShader as the Vulkan driver) or lvp (lavapipe, its shader cache off). SPEC: a tuning
# (`matmul=direct:16x8,small=direct:8x16,...`). Prints "ICD MODE SECONDS MD5-OF-OUTPUT" per run, modes in turn.
set -euo pipefail
cd "$(dirname "$0")/.."
icd=$1 spec=$2 runs=$3
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
if [ "$icd" = ss ]; then
  export VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json
else
  unset VK_ICD_FILENAMES
  export MESA_SHADER_CACHE_DISABLE=true
fi
B=target/release/bertgpu
M=models/all-MiniLM-L6-v2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/key" "$work/empty" "$work/cached"
# The adapter's and model shape's cache key: the one --crossover caches its measurement under, less its suffix.
echo "hi" | BERTGPU_CACHE_DIR="$work/key" "$B" embed -m "$M" --device gpu --crossover >/dev/null 2>&1
key=$(python3 -c 'import json,sys; print(next(iter(json.load(open(sys.argv[1])))).split(";")[0])' "$work/key/tuning.json")
python3 -c 'import json,sys; json.dump({sys.argv[2]: sys.argv[3]}, open(sys.argv[1], "w"))' \
  "$work/cached/tuning.json" "$key" "$spec"
run() { # MODE, then env assignments
  local mode=$1; shift
  local t
  t=$( { echo "hello world" | env "$@" /usr/bin/time -f %e "$B" embed -m "$M" --device gpu | md5sum | cut -c1-8; } 2>&1 )
  echo "$icd $mode $(echo $t | tr '\n' ' ')"
}
for _ in $(seq "$runs"); do
  run defaults BERTGPU_CACHE_DIR="$work/empty"
  run before BERTGPU_CACHE_DIR="$work/empty" BERTGPU_TUNING="$spec"
  run now BERTGPU_CACHE_DIR="$work/cached"
done
