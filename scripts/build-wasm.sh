#!/usr/bin/env bash
# Builds the npm package `bertgpu` into pkg/ (ready for `npm pack pkg/`):
#   cargo (wasm32, Cargo.toml's `wasm` profile: release, sized for download; SIMD128 from .cargo/config.toml; again
#   with the relaxed-simd feature; again with threads, through Debian's toolchain, with and without relaxed SIMD)
#   → wasm-bindgen --target web → wasm-opt -Oz (npm binaryen; Debian's wasm-opt 108 makes modules that fail at
#   start-up in Chromium) → the hand-written wrapper from js/.
# Needs: rustup target wasm32-unknown-unknown, wasm-bindgen-cli of the same version as the wasm-bindgen crate in
# Cargo.lock, `npm ci` (binaryen), and for the threaded build Debian's rustc-web, cargo-web, rust-web-src and lld
# (scripts/setup.sh installs them). Prints the wasm size, raw and gzipped.
#   scripts/build-wasm.sh [--bench]
# --bench: the same package into pkg-bench/ (own cargo target dirs) with the `bench-exports` feature, whose debug
# exports bench/kernel.mjs calls; the shipped package leaves them out.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=pkg
TARGET=target
EXTRA=""
if [ "${1:-}" = "--bench" ]; then
  OUT=pkg-bench
  TARGET=target/bench
  EXTRA=bench-exports
fi
WASM_BINDGEN=${WASM_BINDGEN:-wasm-bindgen}
WASM_OPT=node_modules/.bin/wasm-opt

want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
have=$("$WASM_BINDGEN" --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  echo "build-wasm: wasm-bindgen CLI ${have:-not found} but Cargo.lock has $want:" >&2
  echo "  cargo install wasm-bindgen-cli --version $want" >&2
  exit 1
fi
# The threaded build's toolchain: Debian's, by full path (rustup's comes first on PATH). Its rustc ships the
# library sources that -Z build-std compiles with atomics.
THREADS_CARGO=${THREADS_CARGO:-/usr/bin/cargo}
THREADS_RUSTC=${THREADS_RUSTC:-/usr/bin/rustc}
if [ ! -x "$THREADS_CARGO" ] || [ ! -x "$THREADS_RUSTC" ] || ! command -v wasm-ld >/dev/null \
  || [ ! -d "$("$THREADS_RUSTC" --print sysroot)/lib/rustlib/src/rust/library" ]; then
  echo "build-wasm: the threaded build needs Debian's rustc-web, cargo-web, rust-web-src and lld: run scripts/setup.sh" >&2
  exit 1
fi
if [ ! -x "$WASM_OPT" ]; then
  echo "build-wasm: $WASM_OPT missing: run \`npm ci\` at the repository root" >&2
  exit 1
fi

# Built beside the old package and moved into place at the end: a build that fails leaves the last good one.
FINAL=$OUT
PARTIAL=$FINAL.partial
OUT=$PARTIAL
rm -rf "$PARTIAL"
trap 'rm -rf "$PARTIAL"' EXIT
# Four builds of the same crate; the package loads the one the browser can run (js/index.js):
#   wasm/          SIMD128 (.cargo/config.toml): every browser with WebGPU.
#   wasm-relaxed/  plus relaxed SIMD (Chrome/Edge 114+) in the Q8_0 kernel (its 16-lane integer dot product:
#                  src/backend/cpu/q8.rs) and the f32 GEMM (f32x4.relaxed_madd: src/backend/cpu/matmul.rs). Its
#                  own target dir, so the builds do not invalidate each other.
#   wasm-threads/, wasm-threads-relaxed/  the same two with threads, for cross-origin isolated pages.
build() { # <out dir> <cargo target dir> <cargo features> [extra wasm-opt flags]
  local dir=$1 target=$2 features=$3 opt=${4:-}
  if [[ ",$features," == *,threads,* ]]; then
    # A std with atomics, compiled from the toolchain's library sources (-Z build-std; RUSTC_BOOTSTRAP=1 lets a
    # stable rustc take -Z flags), and a module that imports one shared memory for every thread and exports the
    # thread-local storage symbols wasm-bindgen's thread transform needs (wasm-ld 14 does not export them by
    # itself). RUSTFLAGS replaces .cargo/config.toml's flags: SIMD128 is named again. --max-memory: a shared memory
    # must declare its maximum; 4 GiB is wasm32's whole address space, as the other builds may grow to.
    RUSTC="$THREADS_RUSTC" RUSTC_BOOTSTRAP=1 \
      RUSTFLAGS="-C target-feature=+simd128,+atomics,+bulk-memory,+mutable-globals -C linker=wasm-ld \
-C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
-C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size -C link-arg=--export=__tls_align \
-C link-arg=--export=__tls_base" \
      "$THREADS_CARGO" build --lib --profile wasm --target wasm32-unknown-unknown --target-dir "$target" \
      --features "$features" -Z build-std=std,panic_abort
  else
    cargo build --lib --profile wasm --target wasm32-unknown-unknown --target-dir "$target" --features "$features"
  fi
  mkdir -p "$OUT/$dir"
  # --experimental-reset-state-function: after a Rust panic the package restarts the module in place
  # (__wbg_reset_state); a bundler cannot follow a re-import of the glue under another URL.
  "$WASM_BINDGEN" --target web --experimental-reset-state-function --out-dir "$OUT/$dir" --out-name bertgpu \
    "$target/wasm32-unknown-unknown/wasm/bertgpu.wasm"
  # The features enabled are the ones rustc emits for wasm32 by default plus SIMD128 (and relaxed SIMD for that
  # build); never --all-features: that lets wasm-opt introduce instructions browsers may not have.
  # shellcheck disable=SC2086
  "$WASM_OPT" -Oz --enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
    --enable-mutable-globals --enable-multivalue --enable-reference-types $opt \
    -o "$OUT/$dir/bertgpu_bg.opt.wasm" "$OUT/$dir/bertgpu_bg.wasm"
  mv "$OUT/$dir/bertgpu_bg.opt.wasm" "$OUT/$dir/bertgpu_bg.wasm"
  # wasm-bindgen's own package.json and .gitignore would shadow ours
  rm -f "$OUT/$dir/package.json" "$OUT/$dir/.gitignore"
}
build wasm "$TARGET" "$EXTRA"
# The feature enables relaxed SIMD for two kernels' functions only (#[target_feature]): the Q8_0 kernel (the same
# integers, so the same results bit for bit) and the f32 GEMM (fused multiply-adds: within f32 rounding of the
# SIMD128 build's). Everything else, dependencies included, compiles exactly as in the SIMD128 build.
build wasm-relaxed "$TARGET/relaxed" "relaxed-simd${EXTRA:+,$EXTRA}" --enable-relaxed-simd
# SIMD128 with threads (src/backend/cpu/threads.rs, js/threads.js): the build cross-origin isolated pages load.
build wasm-threads "$TARGET/threads" "threads${EXTRA:+,$EXTRA}" --enable-threads
# Threads and relaxed SIMD: what those pages load where the engine has relaxed SIMD (as wasm-relaxed/ is to wasm/).
build wasm-threads-relaxed "$TARGET/threads-relaxed" "threads,relaxed-simd${EXTRA:+,$EXTRA}" "--enable-threads --enable-relaxed-simd"

cp js/*.js js/*.d.ts "$OUT/"
cp js/package.json "$OUT/package.json"
[ -f js/README.md ] && cp js/README.md "$OUT/README.md"
version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
node -e '
  const fs = require("fs"); const p = process.argv[1];
  const j = JSON.parse(fs.readFileSync(p)); j.version = process.argv[2];
  fs.writeFileSync(p, JSON.stringify(j, null, 2) + "\n");' "$OUT/package.json" "$version"

rm -rf "$FINAL"
mv "$OUT" "$FINAL"
OUT=$FINAL
for dir in wasm wasm-relaxed wasm-threads wasm-threads-relaxed; do
  raw=$(stat -c %s "$OUT/$dir/bertgpu_bg.wasm")
  gz=$(gzip -9 -c "$OUT/$dir/bertgpu_bg.wasm" | wc -c)
  echo "build-wasm: $OUT/$dir/bertgpu_bg.wasm $raw bytes ($((raw / 1024)) KiB), gzip -9 $gz bytes ($((gz / 1024)) KiB)"
done
