"""mysql:// (lease-table mode) on a MariaDB server started for the session (or $DISTLOCK_TEST_MYSQL_URL)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.servers.mysql import mariadb_server


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    env = os.environ.get("DISTLOCK_TEST_MYSQL_URL")
    if env:
        yield env
        return
    with mariadb_server() as srv:
        yield srv.url
