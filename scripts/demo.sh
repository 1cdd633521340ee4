#!/usr/bin/env bash
# The demo page: fetches the models, then serves the repository on http://127.0.0.1:8080 (the page is www/).
# Placeholder until the web build lands: serves the files as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh
port="${PORT:-8080}"
echo "open http://127.0.0.1:$port/www/  (Ctrl-C stops the server)"
exec python3 -m http.server --bind 127.0.0.1 "$port"
