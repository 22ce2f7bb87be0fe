"""mysql:// in connection-bound mode with row locks (``?mode=session&session_lock=row``: ``SELECT ... FOR
UPDATE`` in a transaction kept open on the pinned connection), on the same server as ``mysql``.

Opt-in: its tests run only with ``--backend mysql_rowlock`` (time budget); without it they are deselected.
"""

from __future__ import annotations

import pytest

from tests.servers.mysql import WEAKER, WEAKER_REASON, skip_unsupported_kinds


@pytest.fixture(scope="session")
def mysql_rowlock_url(mysql_url: str) -> str:
    sep = "&" if "?" in mysql_url else "?"
    return f"{mysql_url}{sep}mode=session&session_lock=row"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "mysql_rowlock" not in (config.getoption("--backend") or []):
        # opt-in (--backend mysql_rowlock): keeps the SQL backends within their CI time budget;
        # tests/test_sql_faults.py covers this variant in the default run
        keep, drop = [], []
        for item in items:
            callspec = getattr(item, "callspec", None)
            mine = callspec is not None and callspec.params.get("backend") == "mysql_rowlock"
            (drop if mine else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
        return
    skip_unsupported_kinds(items, "mysql_rowlock", WEAKER, WEAKER_REASON)
