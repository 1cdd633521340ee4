#!/usr/bin/env bash
# The test command (README and .ci/run both run exactly this): set-up (scripts/setup.sh test: Debian's lavapipe and
# chromium, the wasm toolchain, npm packages and models, quiet when they are there), then every test: `cargo test`
# (the native GPU tests on the machine's Vulkan adapter, lavapipe where there is no GPU), the npm package built and
# driven in headless Chromium (tests/browser/), installed into Node.js and bundled apps (tests/node/,
# tests/bundlers/), and the scripts' own tests (tests/scripts/).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" # silences harmless Vulkan loader warnings
# A GPU test that finds no adapter fails, naming the missing driver, instead of passing without running.
export BERTGPU_REQUIRE_GPU=1
phase() { echo "=== $1 ($(date +%T))" >&2; }
phase "set-up"
scripts/setup.sh test
phase "cargo test"
cargo test --locked
phase "npm package (scripts/build-wasm.sh)"
scripts/build-wasm.sh
phase "browser tests"
# A test that runs past 10 minutes (the slowest takes about 2) is stopped and fails, with what its page was doing
# (harness.mjs), instead of holding up the rest.
node --test --test-timeout=600000 tests/browser/
# The packed package as users install it: Node.js (tests/node/) and apps built by Vite, webpack, esbuild and a
# Manifest V3 extension (tests/bundlers/; each app's `npm ci` from its lock file on the first run).
phase "Node.js and bundler tests"
node --test tests/node/ tests/bundlers/
phase "script tests"
node --test tests/scripts/
