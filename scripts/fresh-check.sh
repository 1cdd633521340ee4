#!/usr/bin/env bash
# README's two commands as a newcomer meets them: a fresh clone of the committed tree, an empty HOME, CARGO_HOME
# (rustup's toolchains are kept: they are the "Rust installed" the README assumes), npm and pip caches, so
# scripts/setup.sh has to install wasm-bindgen-cli, the npm packages and the models itself. Runs scripts/demo.sh until
# it serves the page, then scripts/test.sh, and prints how long each took (README's first-run times come from here).
# Debian's packages cannot be uninstalled for the run; on a machine without them, setup.sh installs them (as root)
# or stops with the sudo line (tests/scripts/setup.test.mjs checks that path).
#
#   scripts/fresh-check.sh [REV]      (default HEAD; about 35 minutes on 2 cores; not part of scripts/test.sh)
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
rev=${1:-HEAD}
scratch=$(mktemp -d /tmp/bertgpu-fresh.XXXXXX)
demo_pid=
cleanup() {
  [ -n "$demo_pid" ] && kill -- -"$demo_pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT

git clone --quiet --no-checkout "$root" "$scratch/repo"
git -C "$scratch/repo" checkout --quiet "$(git -C "$root" rev-parse "$rev")"
mkdir -p "$scratch/home" "$scratch/cargo/bin"
# rustup's proxies (cargo, rustc, ...) and nothing that was cargo-installed.
for tool in cargo rustc rustdoc rustup; do
  cp -P "${CARGO_HOME:-$HOME/.cargo}/bin/$tool" "$scratch/cargo/bin/"
done
fresh_env=(env -i HOME="$scratch/home" CARGO_HOME="$scratch/cargo" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
  PATH="$scratch/cargo/bin:$(dirname "$(command -v python3)"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  TERM=dumb)
[ -n "${PYENV_ROOT:-}" ] && fresh_env+=(PYENV_ROOT="$PYENV_ROOT")
[ -d "$HOME/.pyenv" ] && fresh_env+=(PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}")
cd "$scratch/repo"

echo "fresh-check: $(git rev-parse --short HEAD) in $scratch/repo"
start=$SECONDS
setsid "${fresh_env[@]}" PORT=0 bash scripts/demo.sh >"$scratch/demo.log" 2>&1 &
demo_pid=$!
until grep -q "bertgpu demo: http" "$scratch/demo.log"; do
  if ! kill -0 "$demo_pid" 2>/dev/null; then
    echo "fresh-check: scripts/demo.sh exited before serving:" >&2
    tail -30 "$scratch/demo.log" >&2
    exit 1
  fi
  sleep 5
done
url=$(grep -o "http://127.0.0.1:[0-9]*/www/" "$scratch/demo.log" | head -1)
code=$(curl -s -o /dev/null -w "%{http_code}" "$url")
demo_s=$((SECONDS - start))
kill -- -"$demo_pid" 2>/dev/null || true
demo_pid=
[ "$code" = 200 ] || { echo "fresh-check: $url answered $code" >&2; exit 1; }
echo "fresh-check: scripts/demo.sh served $url after ${demo_s}s"
grep "^setup:\|^demo:" "$scratch/demo.log" || true

start=$SECONDS
if ! "${fresh_env[@]}" bash scripts/test.sh >"$scratch/test.log" 2>&1; then
  echo "fresh-check: scripts/test.sh failed after $((SECONDS - start))s:" >&2
  tail -40 "$scratch/test.log" >&2
  exit 1
fi
echo "fresh-check: scripts/test.sh passed in $((SECONDS - start))s"
grep "^=== " "$scratch/test.log" || true
