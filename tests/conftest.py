"""Test wiring: the backend matrix, store fixtures, unique lock names.

Backends plug in as modules in ``tests/plugins/<name>.py`` (loaded below). Each defines a session fixture ``<name>_url`` that starts the real server(s) (see ``tests/servers/``) or returns
``$DISTLOCK_TEST_<NAME>_URL`` when that is set, and yields the store URL. Adding a plugin adds the backend
to every conformance test (``backend_url`` is parametrized over all of them), sync and async.
"""

from __future__ import annotations

import os
import pkgutil
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

import distlock

_plugin_pkg = "tests.plugins"
PLUGINS = sorted(m.name for m in pkgutil.iter_modules([os.path.join(os.path.dirname(__file__), "plugins")]))
pytest_plugins = [f"{_plugin_pkg}.{m}" for m in PLUGINS]
#: the module name is the backend name: tests/plugins/redis.py defines the fixture ``redis_url``
BACKENDS: list[str] = list(PLUGINS)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        action="append",
        default=[],
        help="run the conformance suite only on these backends (repeatable); default: all",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_url" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--backend") or BACKENDS
        metafunc.parametrize("backend", [b for b in BACKENDS if b in chosen], indirect=False, scope="session")


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
