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
what="${1:-dev}"   # dev: every extra + plot + the dev dependency group; else the extras to install, e.g. "redis"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)-$what"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # a venv from before the rename holds the old distribution `distlock` (same import name): drop it first
  if "$PY" -m pip show -q distlock >/dev/null 2>&1; then "$PY" -m pip uninstall -q -y distlock; fi
  if [ "$what" = dev ]; then
    # the dev tools are a PEP 735 dependency group (not an extra users could install): read it from pyproject.toml
    # with the standard library, so any pip can install it
    "$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["dependency-groups"]["dev"]))' \
      > .venv/.distlock-dev-group.txt
    "$PY" -m pip install -q --disable-pip-version-check -e ".[all,plot]" -r .venv/.distlock-dev-group.txt
  else
    "$PY" -m pip install -q --disable-pip-version-check -e ".[$what]"
  fi
  echo "$want" > "$stamp"
fi
export PY
