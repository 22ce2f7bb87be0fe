#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine: installs the servers and the Python deps that
# are missing, checks the generated sync code, lints, type-checks, builds the docs site (strict), then runs pytest
# (which starts and stops its own servers on free loopback ports, and builds the wheel and installs it into a bare
# venv: tests/test_package.py) on two worker processes. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install_servers.sh
source scripts/setup.sh dev
"$PY" scripts/gen_sync.py --check
"$ROOT/.venv/bin/ruff" check --quiet src tests tools scripts benchmarks
"$ROOT/.venv/bin/mypy" --no-error-summary src/distlock
# the docs site (MkDocs + the API reference from the docstrings); warnings are errors
site="$(mktemp -d)"
"$ROOT/.venv/bin/mkdocs" build --strict --quiet --site-dir "$site"
rm -rf "$site"
# Two worker processes (pytest-xdist), each with its own servers: most tests wait on a server or a fault, not on
# a CPU, so the suite takes about half as long on 2 cores. DISTLOCK_TEST_WORKERS=0 runs it in this process.
exec "$PY" -m pytest -q -p no:cacheprovider -n "${DISTLOCK_TEST_WORKERS:-2}" "$@"
