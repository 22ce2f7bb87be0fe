"""mysql:// in connection-bound mode (``?mode=session``: ``GET_LOCK``), on the same server as ``mysql``."""

from __future__ import annotations

import pytest

#: conformance tests of a kind GET_LOCK cannot do (no shared mode: rwlock); semaphore tests check the refusal
UNSUPPORTED = ("rwlock", "timed_out_acquire_leaves_nothing_behind", "-write]")


@pytest.fixture(scope="session")
def mysql_session_url(mysql_url: str) -> str:
    sep = "&" if "?" in mysql_url else "?"
    return f"{mysql_url}{sep}mode=session"


def skip_unsupported_kinds(items: list[pytest.Item], backend: str, unsupported: tuple[str, ...]) -> None:
    """Session mode refuses these kinds with UnsupportedFeature (tests/test_sql_session.py checks that)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("backend") != backend:
            continue
        if any(word in item.name for word in unsupported):
            item.add_marker(pytest.mark.skip(reason=f"{backend} does not offer this kind (UnsupportedFeature)"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_unsupported_kinds(items, "mysql_session", UNSUPPORTED)
