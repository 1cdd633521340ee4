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
set -euo pipefail
cd "$(dirname "$0")/.."
for p in /.gl/ /.dev/; do grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >> .git/info/exclude; done
if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update >/dev/null
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
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
