#!/usr/bin/env bash
# The main job: `distlock demo` on the embedded SQLite default, installing what it needs first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh" dev
exec "$ROOT/.venv/bin/distlock" demo "$@"
