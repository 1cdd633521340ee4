#!/usr/bin/env bash
# Runs every fuzz target for a while (default 60 s each, one at a time), starting from the committed corpus.
# New inputs go to a scratch folder, not into fuzz/corpus/ (minimize and commit them by hand: fuzz/README.md).
# Exits non-zero on the first finding; the input is in fuzz/artifacts/<target>/.
#   scripts/fuzz.sh [seconds per target] [targets...]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH"
secs=${1:-60}; shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config_json safetensors torch_bin gguf tokenizer_json vocab_txt inference)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version 0.13.2
# cargo-fuzz passes -Z flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain take them. No sanitizer (-s none):
# the crate and its parsers are safe Rust, and a panic or a failed check is what the targets look for.
RUSTC_BOOTSTRAP=1 cargo fuzz build -s none
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "artifacts/$t"
  echo "=== $t (${secs}s)"
  target/x86_64-unknown-linux-gnu/release/"$t" "$scratch/$t" "corpus/$t" -artifact_prefix="artifacts/$t/" \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 2>&1 \
    | grep -E '^(#[0-9]+ +(INITED|DONE)|stat::number_of_executed_units|==[0-9]+== ERROR|thread .* panicked)' || true
  # libFuzzer's status is lost in the pipe: a finding leaves its input in artifacts/.
  if compgen -G "artifacts/$t/*" >/dev/null; then echo "finding in $t: $(ls artifacts/$t/)"; exit 1; fi
done
