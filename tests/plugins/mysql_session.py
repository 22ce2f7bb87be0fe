"""mysql:// in connection-bound mode (``?mode=session``: ``GET_LOCK``), on the same server as ``mysql``."""

from __future__ import annotations

import pytest

from tests.servers.mysql import skip_unsupported_kinds

#: conformance tests of a kind GET_LOCK cannot do (no shared mode: rwlock); semaphore tests check the refusal
UNSUPPORTED = ("rwlock", "timed_out_acquire_leaves_nothing_behind", "-write]")


@pytest.fixture(scope="session")
def mysql_session_url(mysql_url: str) -> str:
    sep = "&" if "?" in mysql_url else "?"
    return f"{mysql_url}{sep}mode=session"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unsupported_kinds(items, "mysql_session", UNSUPPORTED)
