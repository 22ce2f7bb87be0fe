#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine: installs the servers and the Python deps that
# are missing, checks the generated sync code, lints, type-checks, then runs pytest (which starts and stops
# its own servers on free loopback ports). Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install_servers.sh
source scripts/setup.sh dev
"$PY" scripts/gen_sync.py --check
"$ROOT/.venv/bin/ruff" check --quiet src tests scripts benchmarks
"$ROOT/.venv/bin/mypy" --no-error-summary src/distlock
exec "$PY" -m pytest -q -p no:cacheprovider "$@"
