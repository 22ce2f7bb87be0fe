"""Re-exports :mod:`distlock._servers.mysql` (one implementation for the tests and ``--spawn``)."""

from __future__ import annotations

import pytest

from distlock._servers.mysql import (
    DATABASE,
    PASSWORD,
    USER,
    admin,
    mariadb_binary,
    mariadb_server,
    start_mariadb,
)

# -- used by the session-mode plugins (tests/plugins/*_session.py) --------------------------------------
#: session mode queues a waiting writer in the server only while its blocking wait runs: a reader arriving
#: in the one round trip between the writer's failed try and that wait still gets in (docs/sql.md)
WEAKER = ("waiting_writer_is_not_starved",)
WEAKER_REASON = "session mode: writers queue server-side only once their wait runs (documented in docs/sql.md)"


def skip_unsupported_kinds(
    items: list[pytest.Item], backend: str, unsupported: tuple[str, ...], reason: str | None = None
) -> None:
    """Skip the conformance tests (by a part of their name) that ``backend`` refuses with UnsupportedFeature
    (tests/test_sql_faults.py checks the refusal itself), or that test a guarantee it documents as weaker."""
    why = reason or f"{backend} does not offer this kind (UnsupportedFeature)"
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("backend") != backend:
            continue
        if any(word in item.name for word in unsupported):
            item.add_marker(pytest.mark.skip(reason=why))


__all__ = [
    "DATABASE",
    "PASSWORD",
    "USER",
    "WEAKER",
    "WEAKER_REASON",
    "admin",
    "mariadb_binary",
    "mariadb_server",
    "skip_unsupported_kinds",
    "start_mariadb",
]
