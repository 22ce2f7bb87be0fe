#!/usr/bin/env bash
# Shared set-up: a venv with distlock (editable) and its dev tools, installed exactly from a lock. Idempotent and
# quick when nothing changed.
# Usage: source scripts/setup.sh [locked|lowest|newest]   (sets $PY to the venv's python)
#   locked (default): .venv from requirements/dev.txt -- what CI runs; the newest versions of the last refresh
#   lowest:           .venv-lowest from requirements/lowest.txt -- the low end of every range the package publishes
#   newest:           .venv-newest made anew from what the index serves today (scripts/lock.py --newest): the check
#                     before a lock refresh or a release (RELEASING.md)
# The locks are compiled by scripts/lock.py; a venv is made anew whenever its lock (or this script) changed, so it
# holds the lock's packages and nothing else.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON_BIN="${PYTHON:-python3}"
if ! "$PYTHON_BIN" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "distlock needs Python >= 3.11 (found: $("$PYTHON_BIN" --version 2>&1))" >&2
  exit 2
fi
deps="${1:-locked}"
case "$deps" in
  locked) venv=.venv lock=requirements/dev.txt ;;
  lowest) venv=.venv-lowest lock=requirements/lowest.txt ;;
  newest) venv=.venv-newest lock="$venv.requirements.txt" ;;
  *) echo "scripts/setup.sh: unknown deps '$deps' (locked, lowest or newest)" >&2; exit 2 ;;
esac
make_venv() {
  rm -rf "$1"
  "$PYTHON_BIN" -m venv "$1" || {
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && "$PYTHON_BIN" -m venv "$1"
  }
}
quiet_pip() {  # pip install into venv $1; without the warning of each index folder this machine's pip.conf
  local venv="$1"; shift  # names that does not exist
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}
if [ "$deps" = newest ]; then
  # uv compiles today's resolution; the locked venv brings it (and is made first if need be)
  [ -x .venv/bin/uv ] || (source scripts/setup.sh locked)
  .venv/bin/python scripts/lock.py --newest "$lock" --python "$(command -v "$PYTHON_BIN")"
fi
stamp="$venv/.distlock-deps"
want="$(cat "$lock" scripts/setup.sh | sha256sum | cut -d' ' -f1) $("$PYTHON_BIN" -c 'import sys; print(sys.version)' | head -1)"
if [ "$deps" = newest ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  make_venv "$venv"
  hashes=(--require-hashes)
  [ "$deps" = newest ] && hashes=()
  # --no-deps: the lock is the whole environment (a package it lacks is an error at import, not a download of
  # whatever version the index serves today); the package itself is built by the locked hatchling, offline
  quiet_pip "$venv" --no-deps "${hashes[@]}" -r "$lock"
  quiet_pip "$venv" --no-deps --no-build-isolation -e .
  echo "$want" > "$stamp"
fi
PY="$ROOT/$venv/bin/python"
export PY
