#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine: installs the servers and the Python deps that
# are missing, checks the generated sync code, lints, type-checks, builds the docs site (strict), then runs pytest
# (which starts and stops its own servers on free loopback ports, and builds the wheel and installs it into a bare
# venv: tests/test_package.py) on two worker processes, then the Redis tests once more on hiredis (below). Extra
# arguments go to pytest.
#
# Which versions of the dependencies (scripts/setup.sh, scripts/lock.py):
#   scripts/test.sh                  the locked environment (requirements/dev.txt): what CI runs, any day
#   scripts/test.sh --deps lowest    the lowest version of every range pyproject.toml publishes
#                                    (requirements/lowest.txt), on the tests that cross every driver seam
#                                    (SEAMS below; extra arguments choose others): CI runs it after the locked pass
#   scripts/test.sh --deps newest    the newest versions the index serves today, every check and the whole suite:
#                                    the check before refreshing the lock or releasing (RELEASING.md)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
deps=locked
if [ "${1:-}" = --deps ]; then
  deps="${2:?--deps takes locked, lowest or newest}"
  shift 2
fi
bash scripts/install_servers.sh
source scripts/setup.sh "$deps"
BIN="$(dirname "$PY")"
export DISTLOCK_TEST_DEPS="$deps"   # tests/test_package.py: a bare install keeps to the same versions
"$PY" scripts/lock.py --check --versions
# The tests whose code paths reach every driver seam: the conformance table on both APIs (every backend, every
# lock kind), each driver's own tests, the asyncio edges (cancellation, uvloop), faults that break connections
# under a call, TLS, the CLI (click, rich), OpenTelemetry and the no-warnings check. About 5 minutes.
SEAMS=(
  tests/_async/test_conformance.py tests/_sync/test_conformance.py tests/test_no_warnings.py
  tests/test_asyncio.py tests/test_async_cancel_points.py tests/test_uvloop.py tests/test_connect_client.py
  tests/test_redis_backend.py tests/test_redis_parser.py tests/test_redis_faults.py tests/test_redis_sentinel.py
  tests/test_mysql_async_driver.py tests/test_pg_async_driver.py tests/test_sql_faults.py
  tests/test_kazoo_handler.py tests/test_zookeeper_faults.py tests/test_etcd_http.py tests/test_etcd_faults.py
  tests/test_tls.py tests/test_cli.py tests/test_bench.py tests/test_otel.py
)
if [ "$deps" = lowest ]; then
  [ "$#" -gt 0 ] || set -- "${SEAMS[@]}"
  "$PY" -m pytest -q -p no:cacheprovider -n "${DISTLOCK_TEST_WORKERS:-2}" "$@"
  exit 0
fi
"$PY" scripts/gen_sync.py --check
"$BIN/ruff" check --quiet src tests tools scripts benchmarks
"$BIN/mypy" --no-error-summary src/distlock
# the docs site (MkDocs + the API reference from the docstrings); warnings are errors
site="$(mktemp -d)"
"$BIN/mkdocs" build --strict --quiet --site-dir "$site"
rm -rf "$site"
# Three worker processes (pytest-xdist), each with its own servers: most tests wait on a server, a lease or a
# fault, not on a CPU, so on 2 cores a third worker still shortens the pass by about a quarter (docs/development.md,
# "The suite's time"). DISTLOCK_TEST_WORKERS=0 runs it in this process.
"$PY" -m pytest -q -p no:cacheprovider -n "${DISTLOCK_TEST_WORKERS:-3}" "$@"
# Then the Redis tests of the wake-ups, hand-overs, faults and failovers once more with redis-py reading replies
# through hiredis (``redis[hiredis]``), which fails differently on a dropped connection (tests/conftest.py). Only
# for the whole suite: extra arguments chose a part of it.
if [ "$#" -eq 0 ]; then
  DISTLOCK_TEST_PARSER=hiredis "$PY" -m pytest -q -p no:cacheprovider -n "${DISTLOCK_TEST_WORKERS:-2}" \
    tests/test_redis_parser.py tests/test_redis_handover.py tests/test_redis_faults.py tests/test_redis_backend.py \
    tests/test_redis_election.py tests/test_redis_sentinel.py tests/test_redlock_handover.py \
    tests/test_redlock_quorum.py tests/_sync/test_redis_one_hop.py tests/_async/test_redis_one_hop.py
fi
