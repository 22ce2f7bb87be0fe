# GENERATED from src/distlock/_backends/sql/_async/rowlock.py by scripts/gen_sync.py: edit that file, not this one.
"""MySQL's row-lock variant of the connection-bound mode (``mode=session&session_lock=row``).

The pinned connection keeps a transaction open holding ``SELECT ... FOR UPDATE`` (exclusive, writers) or
``LOCK IN SHARE MODE`` (readers) on the name's row of ``<prefix>_rows``, so a plain ``SELECT ... FOR UPDATE`` of
another application on that row excludes the lock and the other way round. Everything but the statements
is the session mode's (``session.py``); the statements are in ``sql/rowlock.py``.
Needs MariaDB >= 10.5 (sequences and ``RETURNING``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...._core.types import Capabilities, Claim, Mode
from ...._errors import UnsupportedFeature
from ...._url import StoreConfig
from .. import rowlock as rs
from .. import stmt as st
from .driver import Sets, SqlDriver
from .session import Pinned, SessionMode


class RowLockMode(SessionMode):
    """``mode=session&session_lock=row`` (MySQL): ``SELECT ... FOR UPDATE`` in a transaction kept open."""

    def __init__(self, config: StoreConfig, driver: type[SqlDriver]) -> None:
        super().__init__(config, driver)
        self.capabilities = Capabilities(modes=frozenset({Mode.EXCLUSIVE, Mode.READ, Mode.WRITE}), fair=False)

    def name_refused(self, name: str) -> str | None:
        return None  # a row is keyed by the name's full hash: the GET_LOCK names' limits do not apply

    def _prepare(self) -> None:
        if not self.fast_session:
            raise UnsupportedFeature("session_lock=row needs MariaDB >= 10.5", backend=self.scheme)
        super()._prepare()

    def _mode_schema(self) -> Sequence[str]:
        return (*rs.row_schema(self.prefix), *super()._mode_schema())  # the clean-up reads the fence table

    def _acquire_call(self, conn: Any, claim: Claim, wait: float | None, change: float | None) -> Sets:
        stmt = rs.row_acquire(self.prefix, claim, wait, change)
        sets = self.driver.session_call(conn, stmt, wait or 0.0)
        if len(sets) == 2 and not sets[0]:  # the name has no row yet: create it, retry
            self.driver.session_call(conn, rs.row_create(self.prefix, claim.name))
            sets = self.driver.session_call(conn, stmt, wait or 0.0)
        return sets

    def _acquired(self, conn: Any, sets: Sets) -> tuple[int, int] | None:
        return rs.row_acquired(sets)

    def _request(self, asked: object, pinned: Pinned) -> str | None:
        return str(asked) if asked else None  # a row-lock record is rewritten by every acquire

    def _unlock_stmt(self, claim: Claim) -> st.Stmt:
        return rs.row_unlock(self.prefix)

    def _check_stmt(self, claim: Claim, change: float | None) -> st.Stmt:
        return rs.row_check(change, self.prefix if self._asked_in() is not None else None)

    def _ask_stmt(self, name: str, request: str) -> st.Stmt:
        return rs.row_ask(self.prefix, name, request)

    def _holder_rows(self, names: Sequence[str] | None, prefix: str) -> list[tuple[Any, ...]]:
        res: st.Result = self._tx(lambda: st.single(rs.row_holders(self.prefix, names, prefix)), tx=False)
        # our own connections: the pinned map is exact (a released record may be read before its DELETE lands)
        with self._mutex:
            pinned_ids = {p.conn_id for p in self._pinned.values()}
            own = set(self._own_conn_ids)

        def live(row: tuple[Any, ...]) -> bool:
            conn_id = int(row[4])
            return conn_id in pinned_ids if conn_id in own else bool(row[7])

        return [row[:7] for row in res.rows if live(row)]
