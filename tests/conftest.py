"""Test wiring: the backend matrix, store fixtures, unique lock names.

The backends are the rows of ``tests/backends.py`` (a plugin loaded here): each row defines a session fixture
``<name>_url`` that starts the real server(s) (see ``tools/servers/``) or returns ``$DISTLOCK_TEST_<NAME>_URL``
when that is set. Adding a row adds the backend to every conformance test (``backend_url`` is parametrized
over all of them), sync and async.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

# redis-py reads replies with hiredis whenever that package is installed (``redis[hiredis]``), else with its own
# pure-Python parser, which is what ``pip install 'python-distlock[redis]'`` gives. The two raise different
# errors on a connection dropped under a read. The suite runs on the pure-Python one; scripts/test.sh runs the
# Redis tests once more with DISTLOCK_TEST_PARSER=hiredis (tests/test_redis_parser.py checks which one runs).
# Before anything imports redis: it picks its parser when it is imported.
if os.environ.get("DISTLOCK_TEST_PARSER", "python") != "hiredis":
    sys.modules["hiredis"] = None  # type: ignore[assignment]

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

import distlock

pytest_plugins = ["tests.backends", "tests.leaks"]

# The default store is host-wide (/var/tmp/distlock): no test writes there. Each test process (each xdist
# worker) gets its own directory, which the processes it starts inherit; removed at its exit.
os.environ["DISTLOCK_HOME"] = tempfile.mkdtemp(prefix="distlock-home-")
atexit.register(shutil.rmtree, os.environ["DISTLOCK_HOME"], ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        action="append",
        default=[],
        help="run the conformance suite only on these backends (repeatable); default: all",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_url" in metafunc.fixturenames:
        from tests.backends import ROWS  # registered as a plugin above: imported by pytest first

        backends = [row.name for row in ROWS]
        chosen = metafunc.config.getoption("--backend") or backends
        metafunc.parametrize("backend", [b for b in backends if b in chosen], indirect=False, scope="session")


@pytest.fixture
def backend_url(backend: str, request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{backend}_url")
    return url


@pytest.fixture
def name() -> str:
    """A lock name no other test uses (servers are shared across tests)."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sync_store(backend_url: str) -> Iterator[distlock.Store]:
    store = distlock.connect(backend_url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
async def async_store(backend_url: str) -> AsyncIterator[distlock.AsyncStore]:
    store = await distlock.connect_async(backend_url)
    try:
        yield store
    finally:
        await store.aclose()
