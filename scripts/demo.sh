#!/usr/bin/env bash
# The demo page (README's main command): set-up (scripts/setup.sh demo: the wasm toolchain, npm packages and models,
# quiet when they are there), builds the npm package into pkg/ when it is missing or older than its sources, then
# serves the repository on http://127.0.0.1:${PORT:-8080}/www/ . After this first set-up everything is local (no CDN,
# no external fonts), and the browser caches the model files for offline visits.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
scripts/setup.sh demo
stale=no
if [ ! -f pkg/wasm/bertgpu_bg.wasm ]; then
  stale=yes
elif [ -n "$(find src js shaders Cargo.toml Cargo.lock -newer pkg/wasm/bertgpu_bg.wasm -print -quit 2>/dev/null)" ]; then
  stale=yes
fi
if [ "$stale" = yes ]; then
  echo "demo: building the wasm package into pkg/ (three release builds: the first takes about 20 minutes on 2 cores)" >&2
  start=$SECONDS
  scripts/build-wasm.sh
  echo "demo: built in $((SECONDS - start)) s" >&2
fi
exec node www/serve.mjs
