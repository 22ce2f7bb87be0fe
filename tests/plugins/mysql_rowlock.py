"""mysql:// in connection-bound mode with row locks (``?mode=session&session_lock=row``: ``SELECT ... FOR
UPDATE`` in a transaction kept open on the pinned connection), on the same server as ``mysql``."""

from __future__ import annotations

import pytest

from tests.servers.mysql import WEAKER, WEAKER_REASON, skip_unsupported_kinds


@pytest.fixture(scope="session")
def mysql_rowlock_url(mysql_url: str) -> str:
    sep = "&" if "?" in mysql_url else "?"
    return f"{mysql_url}{sep}mode=session&session_lock=row"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unsupported_kinds(items, "mysql_rowlock", WEAKER, WEAKER_REASON)
