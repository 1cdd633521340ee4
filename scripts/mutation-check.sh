#!/usr/bin/env bash
# Does the suite notice when something breaks? Each mutation below breaks one thing on purpose (a golden value
# nudged past its tolerance, a gradient zeroed, a CLI's output emptied, the GPU driver hidden) and runs the tests that
# should notice; at least one of them must fail. docs/TESTING.md says why.
#
#   scripts/mutation-check.sh [REV]      (default HEAD; the committed tree, not uncommitted edits)
#
# Works in a git worktree under /tmp, never in this checkout, with its own target directory (the checkout's tests
# run target/debug/bertgpu, which a mutant CLI must not replace); the first run seeds it from target/debug so only
# this crate is rebuilt. Needs models/ (scripts/fetch-models.sh) and, for the GPU mutations, an adapter (lavapipe).
# Takes a few minutes per source mutation on 2 cores. Not part of scripts/test.sh. Exit status 1 if any mutation
# survives, a mutant does not build, or the unmutated tests fail.
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
rev=${1:-HEAD}
export CARGO_TARGET_DIR=${MUTATION_TARGET_DIR:-/tmp/bertgpu-mutants-target}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
scratch=$(mktemp -d /tmp/bertgpu-mutants.XXXXXX)
tree=$scratch/tree
cleanup() {
    git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true
    rm -rf "$scratch"
}
trap cleanup EXIT

git -C "$root" worktree add --detach --quiet "$tree" "$rev"
[ -d "$root/models" ] || { echo "mutation-check: $root/models is missing: run scripts/fetch-models.sh" >&2; exit 1; }
ln -s "$root/models" "$tree/models"
if [ ! -d "$CARGO_TARGET_DIR/debug" ] && [ -d "$root/target/debug" ]; then
    mkdir -p "$CARGO_TARGET_DIR"
    cp -a "$root/target/debug" "$CARGO_TARGET_DIR/"
fi
cd "$tree"

# replace FILE OLD NEW: exactly one occurrence, or the mutation is void and the check fails.
replace() {
    python3 - "$@" <<'EOF'
import sys
path, old, new = sys.argv[1:]
s = open(path).read()
if s.count(old) != 1:
    sys.exit(f"{path}: expected one `{old}`, found {s.count(old)}")
open(path, "w").write(s.replace(old, new))
EOF
}

# nudge OP FILE VALUE KEY...: adds VALUE to (OP "add") or multiplies by VALUE (OP "mul") the number at that path
# of keys / indices in a JSON file.
nudge() {
    python3 - "$@" <<'EOF'
import json, sys
op, path, value, *keys = sys.argv[1:]
g = json.load(open(path))
node = g
for k in keys[:-1]:
    node = node[int(k) if isinstance(node, list) else k]
last = int(keys[-1]) if isinstance(node, list) else keys[-1]
if not isinstance(node[last], float):
    sys.exit(f"{path} {keys}: not a number")
node[last] = node[last] + float(value) if op == "add" else node[last] * float(value)
json.dump(g, open(path, "w"))
EOF
}
# bump FILE DELTA KEY...: adds DELTA. scale FILE FACTOR KEY...: multiplies by FACTOR (a relative nudge, for
# relative bounds).
bump() { nudge add "$@"; }
scale() { nudge mul "$@"; }

# cargo_tests ARGS...: runs `cargo test --locked ARGS`; the failed tests' names go to $scratch/failed.
cargo_tests() {
    local log=$scratch/log build=()
    for a in "$@"; do
        [ "$a" = -- ] && break
        build+=("$a")
    done
    if ! cargo test --locked --no-run "${build[@]}" >"$log" 2>&1; then
        return 2
    fi
    local rc=0
    cargo test --locked --no-fail-fast "$@" >"$log" 2>&1 || rc=$?
    sed -n 's/^---- \(.*\) stdout ----$/\1/p' "$log" | paste -sd' ' >"$scratch/failed"
    return $rc
}

# The tests each mutation runs (filters after --).
T_MODEL=(--test model_cpu)
T_LLAMA=(--test gguf -- llama_cpp)
T_HEADS=(--test heads_cli)
T_TRAIN_CPU=(--lib --test train_golden -- xent cpu_matches)
T_TRAIN_GPU=(--test train_gpu_ops --test train_golden)
T_GPU=(--test gpu_kernels)
T_FINETUNE=(--test finetune_golden -- classify_matches_pytorch_on_the_cpu)
T_PRETRAIN=(--test pretrain_golden)
T_LORA=(--test lora_golden)
T_LORA_MORE=(--test lora_modernbert_albert -- on_the_cpu)
T_FAMILY=(--test roberta)
T_QA=(--test roberta --test electra_albert --test distilbert)
T_SHARDS=(--test camembert -- cpu inconsistent)
T_ZERO_SHOT=(--test zero_shot -- cpu cli)
T_JINA=(--test jina -- on_cpu)
T_GATED=(--test finetune_families -- on_the_cpu)
T_MEMORY=(--test training_memory -- every_family)

status=0
echo "mutation-check at $(git rev-parse --short HEAD), target $CARGO_TARGET_DIR"
for t in T_MODEL T_LLAMA T_HEADS T_TRAIN_CPU T_TRAIN_GPU T_GPU T_FINETUNE T_PRETRAIN T_LORA T_LORA_MORE T_FAMILY T_QA T_SHARDS T_ZERO_SHOT T_JINA T_GATED T_MEMORY; do
    declare -n args=$t
    if ! cargo_tests "${args[@]}"; then
        echo "BASELINE FAILS   cargo test ${args[*]}: $(cat "$scratch/failed" 2>/dev/null)"
        tail -20 "$scratch/log"
        exit 1
    fi
done
echo "baseline         the unmutated tests pass"

# mutate NAME WHAT TESTS-ARRAY COMMAND...: applies COMMAND in the scratch tree, runs the tests, restores the tree.
mutate() {
    local name=$1 what=$2 tests=$3
    shift 3
    declare -n targs=$tests
    if ! "$@"; then
        echo "VOID             $name: the mutation did not apply"
        status=1
        return
    fi
    local rc=0
    cargo_tests "${targs[@]}" || rc=$?
    if [ $rc -eq 2 ]; then
        echo "DOES NOT BUILD   $name"
        tail -20 "$scratch/log"
        status=1
    elif [ $rc -eq 0 ]; then
        echo "SURVIVED         $name: $what; cargo test ${targs[*]} passed"
        status=1
    else
        echo "killed           $name: $what; failed: $(cat "$scratch/failed")"
    fi
    git checkout --quiet -- .
}

mutate golden-model "MiniLM's golden sentence embedding, one value + 2e-4 (2x HIDDEN_ATOL)" T_MODEL \
    bump tests/golden/model.json 2e-4 all-MiniLM-L6-v2 mean_normalized 0 0
mutate golden-llamacpp "the llama.cpp file's PyTorch embedding, one value + 2e-6 (2x LLAMACPP_EMBED_ATOL)" T_LLAMA \
    bump tests/golden/llamacpp_tiny_bert.json 2e-6 embeddings texts 0 mean_pooled 0
mutate golden-heads "the classifier pipeline's top score + 2e-5 (2x heads_cli's SCORE_TOL)" T_HEADS \
    bump tests/golden/heads.json 2e-5 tiny_classifier 0 pipeline 0 score
mutate golden-finetune "PyTorch's third fine-tuning step loss (classify) x (1 + 4e-5) (2x LOSS_RTOL)" T_FINETUNE \
    scale tests/golden/finetune.json 1.00004 cases classify losses 2
mutate golden-pretrain "PyTorch's third pre-training step loss x (1 + 1e-5) (2x LOSS_RTOL)" T_PRETRAIN \
    scale tests/golden/pretrain.json 1.00001 losses 2
mutate golden-lora "one LoRA B entry after 5 steps (qv_classify) + 6e-6 (2x PARAM_ATOL)" T_LORA \
    bump tests/golden/lora.json 6e-6 cases qv_classify params_after bert.encoder.layer.0.attention.self.query.lora_B.weight 0
mutate lora-wi-unswapped "ModernBERT's and JinaBERT's adapter on mlp.Wi / gated_layers added in the module's order where the forward reads the weight swapped" \
    T_LORA_MORE replace src/training/lora_peft.rs 'let perm = ((modern || jina) && weight == i).then(' \
    'let perm = (false && (modern || jina) && weight == i).then('
mutate golden-family "RoBERTa's classifier pipeline top score + 1e-5 (2x family SCORE_TOL)" T_FAMILY \
    bump tests/golden/roberta.json 1e-5 roberta classifier 0 pipeline 0 score
mutate qa-first-window "QA answers from the first window that has one, not the best over all windows" T_QA \
    replace src/heads/qa.rs 'if best.is_none_or(|(b, ..)| score > b) {' 'if best.is_none() {'
mutate zero-grad-cpu "the CPU backend's softmax cross-entropy gradient is 0" T_TRAIN_CPU \
    replace src/backend/cpu/train.rs '*v = (*v / sum - onehot) * inv_b;' '*v = 0.0 * (*v / sum - onehot) * inv_b;'
mutate zero-grad-gpu "the GPU's softmax cross-entropy gradient (train.wgsl) is 0" T_TRAIN_GPU \
    replace shaders/train.wgsl 'y[base + j] = (exp(a[base + j] - mx) / sum - onehot) * inv_b;' \
    'y[base + j] = 0.0 * (exp(a[base + j] - mx) / sum - onehot) * inv_b;'
mutate empty-cli "bertgpu classify prints [] for every line" T_HEADS \
    replace src/bin/bertgpu/main.rs 'pollster::block_on(engine.classify(&pairs, top_k))' \
    'pollster::block_on(engine.classify(&pairs, top_k)).map(|mut rows| { rows.iter_mut().for_each(Vec::clear); rows })'
mutate golden-zero-shot "the zero-shot pipeline's second score of a text + 1e-5 (2x family SCORE_TOL)" T_ZERO_SHOT \
    bump tests/golden/zero_shot.json 1e-5 families bert cases 0 results 0 scores 1
mutate zero-shot-contradiction "zero-shot's contradiction index 1 where entailment is 0 (the pipeline's is the last)" \
    T_ZERO_SHOT replace src/tasks/zero_shot.rs 'if entailment == 0 { labels.len() - 1 } else { 0 }' \
    'if entailment == 0 { 1 } else { 0 }'
mutate golden-camembert "CamemBERT's golden mean embedding, one value + 5e-5 (2x CPU_ATOL), read from shards too" \
    T_SHARDS bump tests/golden/camembert.json 5e-5 camembert embeddings 0 mean 0
mutate alibi-dropped "JinaBERT's ALiBi left out of the score bias its attention reads" T_JINA \
    replace src/model/bert.rs 'if let Some(a) = alibi {' 'if let Some(a) = alibi.filter(|_| false) {'
mutate gated-unswapped "training reads ModernBERT's Wi and JinaBERT's gated_layers in their stored order, not swapped" \
    T_GATED replace src/training/encoder/gated.rs '(0..2 * n).map(|i| ((i + n) % (2 * n)) as u32).collect()' \
    '(0..2 * n).map(|i| i as u32).collect()'
mutate memory-gated-narrow "the memory statement counts a gated up-projection i wide, not [up | gate]'s 2i" T_MEMORY \
    replace src/config/encoder.rs 'FeedForward::Gated => 2 * i,' 'FeedForward::Gated => i,'
mutate shard-twice "a tensor found in a second shard is not refused as such" T_SHARDS \
    replace src/weights/sharded.rs 'self.found.insert(name.to_string(), shard.to_string()) {' \
    'self.found.insert(name.to_string(), shard.to_string()).filter(|_| false) {'

# Not a change to the tree: the driver hidden, with CI's BERTGPU_REQUIRE_GPU=1.
rc=0
VK_ICD_FILENAMES=/nonexistent.json __EGL_VENDOR_LIBRARY_FILENAMES=/nonexistent.json BERTGPU_REQUIRE_GPU=1 \
    cargo_tests "${T_GPU[@]}" || rc=$?
if [ $rc -eq 1 ] || [ $rc -eq 101 ]; then
    echo "killed           no-adapter: Vulkan and EGL hidden, BERTGPU_REQUIRE_GPU=1; failed: $(cat "$scratch/failed")"
else
    echo "SURVIVED         no-adapter: Vulkan and EGL hidden, BERTGPU_REQUIRE_GPU=1; cargo test ${T_GPU[*]} passed"
    status=1
fi

# The browser suite, against the package built in this checkout's pkg/ (build it from the same revision first:
# scripts/build-wasm.sh) and its node_modules; the tree's target/ is the mutants' (the unmutated CLI by now: the
# no-adapter run above rebuilt it), where the tests' GGUF conversions find bertgpu.
if [ -f "$root/pkg/wasm/bertgpu_bg.wasm" ] && [ -d "$root/node_modules/playwright-core" ]; then
    ln -s "$root/pkg" "$tree/pkg"
    ln -s "$root/node_modules" "$tree/node_modules"
    ln -s "$CARGO_TARGET_DIR" "$tree/target"
    if ! node --test tests/browser/embed.test.mjs >"$scratch/log" 2>&1; then
        echo "BASELINE FAILS   node --test tests/browser/embed.test.mjs"
        tail -30 "$scratch/log"
        exit 1
    fi
    bump tests/golden/model.json 2e-6 all-MiniLM-L6-v2 mean_normalized 2 100
    if node --test tests/browser/embed.test.mjs >"$scratch/log" 2>&1; then
        echo "SURVIVED         golden-browser: MiniLM's golden vector, one value + 2e-6 (2x CPU_NORMALIZED_ATOL); tests/browser/embed.test.mjs passed"
        status=1
    else
        echo "killed           golden-browser: MiniLM's golden vector, one value + 2e-6 (2x CPU_NORMALIZED_ATOL); failed: $(grep -c '^not ok' "$scratch/log") tests of embed.test.mjs"
    fi
    git checkout --quiet -- .
else
    echo "VOID             golden-browser: $root/pkg or $root/node_modules is missing (scripts/build-wasm.sh, npm ci)"
    status=1
fi

[ $status -eq 0 ] && echo "mutation-check: every mutation was caught" || echo "mutation-check: FAILED (see above)"
exit $status
