#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine: installs the servers and the Python deps that
# are missing, checks the generated sync code, lints, type-checks, builds the docs site (strict), then runs pytest
# (which starts and stops its own servers on free loopback ports, and builds the wheel and installs it into a bare
# venv: tests/test_package.py) on two worker processes, then the Redis tests once more on hiredis (below). Extra
# arguments go to pytest.
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
"$PY" -m pytest -q -p no:cacheprovider -n "${DISTLOCK_TEST_WORKERS:-2}" "$@"
# Then the Redis tests of the wake-ups, hand-overs, faults and failovers once more with redis-py reading replies
# through hiredis (``redis[hiredis]``), which fails differently on a dropped connection (tests/conftest.py). Only
# for the whole suite: extra arguments chose a part of it.
if [ "$#" -eq 0 ]; then
  DISTLOCK_TEST_PARSER=hiredis "$PY" -m pytest -q -p no:cacheprovider -n "${DISTLOCK_TEST_WORKERS:-2}" \
    tests/test_redis_parser.py tests/test_redis_handover.py tests/test_redis_faults.py tests/test_redis_backend.py \
    tests/test_redis_election.py tests/test_redis_sentinel.py tests/test_redlock_handover.py \
    tests/test_redlock_quorum.py tests/_sync/test_redis_one_hop.py tests/_async/test_redis_one_hop.py
fi
