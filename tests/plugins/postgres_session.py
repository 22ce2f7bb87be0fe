"""postgres:// in connection-bound mode (``?mode=session``: advisory locks), on the same server as ``postgres``."""

from __future__ import annotations

import pytest

from tests.servers.mysql import WEAKER, WEAKER_REASON, skip_unsupported_kinds

#: nothing to skip: semaphore tests check the refusal themselves
UNSUPPORTED: tuple[str, ...] = ()


@pytest.fixture(scope="session")
def postgres_session_url(postgres_url: str) -> str:
    sep = "&" if "?" in postgres_url else "?"
    return f"{postgres_url}{sep}mode=session"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unsupported_kinds(items, "postgres_session", UNSUPPORTED)
    skip_unsupported_kinds(items, "postgres_session", WEAKER, WEAKER_REASON)
