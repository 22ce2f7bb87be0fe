#!/usr/bin/env bash
# Shared set-up: a venv in .venv with distlock and its dev tools. Idempotent and quick when nothing changed.
# Usage: source scripts/setup.sh   (sets $PY to the venv's python)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON_BIN="${PYTHON:-python3}"
if ! "$PYTHON_BIN" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "distlock needs Python >= 3.11 (found: $("$PYTHON_BIN" --version 2>&1))" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON_BIN" -m venv .venv || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && "$PYTHON_BIN" -m venv .venv; }
fi
PY="$ROOT/.venv/bin/python"
stamp=".venv/.distlock-deps"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)-${1:-dev}"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$PY" -m pip install -q --disable-pip-version-check -e ".[${1:-dev}]"
  echo "$want" > "$stamp"
fi
export PY
