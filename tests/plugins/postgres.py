"""postgres:// (lease-table mode) on a PostgreSQL server started for the session (or $DISTLOCK_TEST_POSTGRES_URL)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.servers.postgres import postgres_server


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    env = os.environ.get("DISTLOCK_TEST_POSTGRES_URL")
    if env:
        yield env
        return
    with postgres_server() as srv:
        yield srv.url
