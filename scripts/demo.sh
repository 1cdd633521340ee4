#!/usr/bin/env bash
# The demo page (README's main command): fetches the models, builds the npm package into pkg/ when it is missing or
# older than its sources, then serves the repository on http://127.0.0.1:${PORT:-8080}/www/ . After this first
# set-up everything is local (no CDN, no external fonts), and the browser caches the model files for offline visits.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh
stale=no
if [ ! -f pkg/wasm/bertgpu_bg.wasm ]; then
  stale=yes
elif [ -n "$(find src js shaders Cargo.toml Cargo.lock -newer pkg/wasm/bertgpu_bg.wasm -print -quit 2>/dev/null)" ]; then
  stale=yes
fi
if [ "$stale" = yes ]; then
  [ -x node_modules/.bin/wasm-opt ] || npm ci --no-audit --no-fund
  scripts/build-wasm.sh
fi
exec node www/serve.mjs
