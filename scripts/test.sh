#!/usr/bin/env bash
# The test command (README and .ci/run both run exactly this): fetches the test models if they are missing,
# then runs every test. Needs Rust and, for the native GPU tests, a Vulkan driver (Mesa lavapipe on machines
# without a GPU: `apt-get install mesa-vulkan-drivers`).
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" # silences harmless Vulkan loader warnings
scripts/fetch-models.sh
cargo test --locked
# The npm package in headless Chromium (tests/browser/): build it (scripts/build-wasm.sh needs the wasm32 target,
# wasm-bindgen-cli and `npm ci`; .ci/run installs them), then drive it on SwiftShader WebGPU and on the wasm CPU path.
[ -x node_modules/.bin/wasm-opt ] && [ -d node_modules/playwright-core ] || npm ci --no-audit --no-fund
scripts/build-wasm.sh
node --test tests/browser/
