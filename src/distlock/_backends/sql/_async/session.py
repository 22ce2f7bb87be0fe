"""The connection-bound mode (``mode=session``, F13 in docs/safety.md): the database's own lock, held by a
connection pinned to the holding.

MySQL ``GET_LOCK`` or PostgreSQL advisory locks (the statements are in ``sql/session.py``; MySQL's
row-lock variant is ``rowlock.py``). The server's idle timeout of the pinned connection is the lease: the
renewer's check every ttl/3 keeps it alive, a holder that stops renewing (or dies) loses it, and a
dropped connection is seen by the next renewal (``lost``). Fences come from the fence sequence (the fence
counter table on MySQL without sequences), and a record per connection says who holds what (``inspect``),
written only when it changes; a connection holding a lock without a record of ours (another application's
plain lock) shows as ``<db>:connection:<id>`` (inspect, list, break_lock and release requests are
``session_admin.py``'s). PostgreSQL's downgrade takes the read on the write holding's own connection
(``SessionMode._downgrade``): the two holdings share it until both are released.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .... import _rt_async as rt
from ...._async.backend import AsyncAttempt, told
from ...._core import forks
from ...._core.timing import Budget, monotonic
from ...._core.types import Capabilities, Claim, Grant, LockInfo, Mode
from ...._errors import BackendError
from ...._url import StoreConfig, scrub
from .. import session as ss
from .. import stmt as st
from .base import CLEANUP_TIMEOUT, SqlBase
from .driver import SESSION_WAIT_SLICE, Sets, SqlDriver, StaleConnection
from .session_admin import SessionAdmin

log = logging.getLogger("distlock")

#: a check of a pinned connection gets this share of the TTL: sent a sixth to a third of a TTL after the last
#: one confirmed, it gives up past the lease clock's at-risk mark (half the lease: ``held.AT_RISK_SHARE``), so
#: the holder is warned first, and before the lease end (the server's idle timeout of the connection, the lease,
#: is a TTL from the last statement it got). Closing the connection ends the lock, so a shorter cut (the lease
#: mode's ``RENEW_SHARE``, after which lease mode simply tries again) came before the warning
CHECK_SHARE = 0.45


@dataclass
class Pinned:
    """The connection that holds one claim's lock, and what is known about it."""

    conn: Any
    claim: Claim
    conn_id: int
    ttl: float = 0.0
    fence: int = 0
    #: the other holding on this connection (PostgreSQL: a downgrade's read and the write it was taken under):
    #: the connection goes back or is closed only once both are let go of, and its loss loses both
    mate: Pinned | None = field(default=None, repr=False, compare=False)


class SessionAttempt(AsyncAttempt):
    backend: SessionMode

    def __init__(self, backend: SessionMode, claim: Claim) -> None:
        super().__init__(backend, claim)
        self.conn: Any = None
        self.taken: tuple[int, int] | None = None  # (fence, connection id) once the server granted it
        #: a downgrade's read: the write holding whose connection takes it
        self.under: Pinned | None = None

    async def _go(self, wait: float | None) -> None:
        b = self.backend
        self.under = b._downgrade_of(self.claim)
        if self.under is not None:
            self.taken = await b._downgrade(self.under, self.claim)
            return
        for attempt in range(2):
            if self.conn is None:
                self.conn = await b._borrow_dedicated()
            try:
                self.taken = await b._session_acquire(self.conn, self.claim, wait)
                return
            except StaleConnection as exc:  # a pooled connection the server had closed: nothing was held
                conn, self.conn = self.conn, None
                await b._close_quietly(conn)
                if attempt:
                    raise b._error("database error", exc) from exc

    async def try_acquire(self) -> Grant:
        if self.taken is None:
            await self._go(None)
        if self.taken is None:
            return Grant(False)
        fence, conn_id = self.taken
        if self.under is not None:
            self.backend._pin(self.under.conn, self.claim, conn_id, fence, mate=self.under)
            return Grant(True, fence=fence)
        conn, self.conn = self.conn, None
        self.backend._pin(conn, self.claim, conn_id, fence)
        return Grant(True, fence=fence)

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        slice_ = SESSION_WAIT_SLICE if timeout is None else min(timeout, SESSION_WAIT_SLICE)
        if slice_ > 0:
            await self._go(slice_)

    async def abandon(self) -> None:
        b = self.backend
        conn, self.conn = self.conn, None
        with b._mutex:
            pinned = b._pinned.get(self.claim.token)
        if pinned is not None and pinned.mate is not None:  # a downgrade's read: the write keeps the connection
            await b._let_go(pinned)
            return
        pinned = b._unpin(self.claim.token)
        closed = [c for c in (conn, None if pinned is None else pinned.conn) if c is not None]
        for c in closed:  # closing the connection drops whatever it holds or waits for ...
            await b._close_quietly(c)
        if closed:  # ... once the server has ended its session, a moment later: wait for that
            await b._until_let_go(self.claim)


class SessionMode(SqlBase):
    """``mode=session``: connection-bound locks; the driver gives ``session_call`` and ``kill_sql``."""

    pins_connections = True

    def __init__(self, config: StoreConfig, driver: type[SqlDriver]) -> None:
        super().__init__(config, driver)
        self.capabilities = Capabilities(
            modes=self.driver.session_modes, fair=False, needs_renewal=True, downgrade=self.driver.session_downgrade
        )
        self._pinned: dict[str, Pinned] = {}
        self._own_conn_ids: set[int] = set()  # connections this store has held locks on
        #: what each connection's holder record says (name, owner, mode), once an acquire wrote it; an acquire
        #: that would write the same record writes none (``ss.session_acquire``'s ``recorded``)
        self._records: weakref.WeakKeyDictionary[Any, tuple[str, str, Mode]] = weakref.WeakKeyDictionary()
        #: inspect, list, break_lock and request_release: every connection's holdings, not only this store's
        self.admin = SessionAdmin(self)

    def after_fork(self) -> None:
        """The parent's holdings live on the sessions they are pinned to: the child must never unlock, check
        or close those (a closed session lets go of the parent's locks)."""
        super().after_fork()
        forks.abandon(self._pinned)
        self._pinned = {}
        self._own_conn_ids = set()
        self._records = weakref.WeakKeyDictionary()

    # -- the statements (``rowlock.py`` gives others) --------------------------------------------------------
    def _mode_schema(self) -> Sequence[str]:
        return ss.session_mode_schema(self.dialect, self.prefix, self.fast_session)

    def _open_cleanup(self) -> st.Stmt | None:
        return ss.session_cleanup(self.dialect, self.prefix, self.fast_session)

    async def _acquire_call(self, conn: Any, claim: Claim, wait: float | None, change: float | None) -> Sets:
        record = (claim.name, claim.owner, claim.mode)
        recorded = self.fast_session and self._records.get(conn) == record
        stmt = ss.session_acquire(self.dialect, self.prefix, claim, wait, change, self.fast_session, recorded)
        sets = await self.driver.session_call(conn, stmt, wait or 0.0, ok=True)
        # written: MariaDB's in front of the lock, whether granted or not; PostgreSQL's with a grant only
        if not recorded and self.fast_session and (self.dialect.name == "mysql" or (sets and sets[-1])):
            self._records[conn] = record
        return sets

    def _acquired(self, conn: Any, sets: Sets) -> tuple[int, int] | None:
        """(fence, connection id) of a grant from ``_acquire_call``'s answer, or None."""
        return ss.session_acquired(self.dialect, sets, self.fast_session, self.driver.connection_id(conn))

    def _unlock_stmt(self, claim: Claim) -> st.Stmt:
        return ss.session_unlock(self.dialect, claim)

    def _check_stmt(self, claim: Claim, change: float | None) -> st.Stmt:
        return ss.session_check(self.dialect, claim, change, self._asked_in())

    def _asked_in(self) -> str | None:
        """The table whose holder records carry release requests (the fast layout's), or None: the portable
        layout keeps one record per name, and a table this store could not give the column has none."""
        return f"{self.prefix}_session_holders" if self.fast_session and self.session_asks else None

    def _ask_stmt(self, name: str, request: str) -> st.Stmt:
        return ss.session_ask(self.dialect, self.prefix, name, request)

    async def _holder_rows(self, names: Sequence[str] | None, prefix: str) -> list[tuple[Any, ...]]:
        """(name, owner, mode, fence, record's connection id, holding connection id, its lock mode) of the
        names' live holders."""
        stmt = ss.session_holders(self.dialect, self.prefix, names, prefix, self.fast_session)
        r: st.Result = await self._tx(lambda: st.single(stmt), tx=False)
        return r.rows

    # -- holdings ----------------------------------------------------------------------------------------------
    async def _until_let_go(self, claim: Claim) -> None:
        """Wait until no connection holds ``claim``'s lock under its record (at most ``CLEANUP_TIMEOUT``).

        A closed connection's locks go when the server notices the close and ends the session, a few ms
        later (more on a loaded server): an acquire that was cancelled or failed with a connection in an
        unknown state returns only once the name is free of it, so it leaves nothing behind. Best effort:
        the server frees the lock by itself in any case, this only keeps the caller from seeing it."""
        owner = claim.owner[:255]
        budget = Budget(CLEANUP_TIMEOUT)  # as any clean-up: a server that does not answer costs at most this
        while budget.end is not None and monotonic() < budget.end:
            try:
                with budget:
                    rows = await self._holder_rows([claim.name], "")
            except BackendError:
                return
            if not any(str(r[1]) == owner and r[4] is not None and r[5] is not None and int(r[4]) == int(r[5])
                       for r in rows):  # fmt: skip
                return
            await rt.sleep(0.01)

    async def _session_acquire(self, conn: Any, claim: Claim, wait: float | None) -> tuple[int, int] | None:
        change = self.driver.timeout_change(conn, claim.ttl)
        try:
            sets = await self._acquire_call(conn, claim, wait, change)
        except StaleConnection:
            raise
        except BaseException as exc:
            if self._db_error(exc):
                raise self._error("database error", exc) from exc
            raise
        return self._acquired(conn, sets)

    def _pin(self, conn: Any, claim: Claim, conn_id: int, fence: int, mate: Pinned | None = None) -> None:
        with self._mutex:
            pinned = self._pinned[claim.token] = Pinned(conn, claim, conn_id, ttl=claim.ttl, fence=fence, mate=mate)
            if mate is not None:
                mate.mate = pinned
            self._own_conn_ids.add(conn_id)

    def _downgrade_of(self, claim: Claim) -> Pinned | None:
        """The live write holding of this store a downgrade's read (``Claim.companion``) is taken under, or None
        (then the read is an ordinary claim: its write was let go of or lost meanwhile)."""
        if claim.companion is None or not self.capabilities.downgrade:
            return None
        with self._mutex:
            under = self._pinned.get(claim.companion)
        if under is None or under.claim.mode is not Mode.WRITE or under.claim.name != claim.name or under.mate:
            return None
        return under

    async def _downgrade(self, under: Pinned, claim: Claim) -> tuple[int, int] | None:
        """The read's shared lock on the connection of the write holding ``under`` (granted at once), and its
        fence. A failure or cancellation leaves that connection in no known state: it is closed, and the write
        is lost with it."""
        try:
            sets = await self.driver.session_call(under.conn, ss.session_downgrade(self.dialect, self.prefix, claim),
                                                  ss.DOWNGRADE_WAIT, ok=True)  # fmt: skip
        except BaseException as exc:
            self._drop(under, "its connection failed while it took the read lock (a downgrade)")
            await self._close_quietly(under.conn)
            if isinstance(exc, Exception) and self._db_error(exc):
                raise self._error("database error", exc) from exc
            raise
        return self._acquired(under.conn, sets)

    def _unpin(self, token: str) -> Pinned | None:
        with self._mutex:
            return self._pinned.pop(token, None)

    async def _check(self, pinned: Pinned, ttl: float) -> bool:
        try:
            change = self.driver.timeout_change(pinned.conn, ttl)
            sets = await self.driver.session_call(pinned.conn, self._check_stmt(pinned.claim, change))
        except Exception as exc:  # the connection is gone: so is the lock
            if not self._db_error(exc):
                raise
            log.debug("session check of %r failed: %s", pinned.claim.name, scrub(str(exc), self.config.password))
            return False
        pinned.ttl = ttl
        held = bool(sets and sets[-1] and sets[-1][0][0])
        if held and len(sets[-1][0]) > 1:
            if sets[-1][0][1] is None:  # its record is gone: the connection's next acquire writes it again
                self._records.pop(pinned.conn, None)
            for p in (pinned, pinned.mate):  # the request names the fence it was made to: one of a pair's
                request = None if p is None else self._request(sets[-1][0][1], p)
                if p is not None and request is not None:  # the release request made to this holding
                    told(self, [p.claim], [(True, request)])
        return held

    def _request(self, asked: object, pinned: Pinned) -> str | None:
        """The release request a check read for ``pinned``'s holding, or None."""
        return ss.session_request(asked, pinned.fence)

    def _lose(self, claim: Claim, pinned: Pinned, why: str) -> None:
        """The lock lives and dies with its connection. Unpin it and tell the store now, whether or not it
        still waits for this renewal's answer (the sync renewer may have stopped waiting)."""
        if self._unpin(claim.token) is pinned and claim.token not in self._releasing:
            self.lost(claim.token, f"connection-bound lock lost: {why}")

    def _drop(self, pinned: Pinned, why: str) -> None:
        """``_lose`` the holding and the other one on its connection (a downgrade's pair), which is closed next."""
        mate = pinned.mate
        self._lose(pinned.claim, pinned, why)
        if mate is not None:
            self._lose(mate.claim, mate, why)

    # -- the backend interface -------------------------------------------------------------------------
    def name_refused(self, name: str) -> str | None:
        return self.driver.lock_name_refused(name)

    def attempt(self, claim: Claim) -> AsyncAttempt:
        return SessionAttempt(self, claim)

    async def _release(self, claim: Claim) -> bool:
        with self._mutex:
            pinned = self._pinned.get(claim.token)
        if pinned is None:
            return False
        return await self._let_go(pinned)

    async def _let_go(self, pinned: Pinned) -> bool:
        """Unlock ``pinned``'s lock; its connection goes back once nothing else is held on it."""
        claim, mate = pinned.claim, pinned.mate
        if mate is None:
            stmt = self._unlock_stmt(claim)
        else:  # a downgrade's pair: this lock alone (the write's release hands the record to the read)
            stmt = ss.session_unlock_one(self.dialect, self.prefix, claim, mate.claim, mate.fence)
        ok = False
        try:
            sets = await self.driver.session_call(pinned.conn, stmt)
            ok = bool(sets and sets[-1] and sets[-1][0][0])
        except Exception as exc:  # a dead connection: the lock went with it
            if not self._db_error(exc):
                raise
        finally:
            self._unpin(claim.token)
        if mate is not None and ok:
            with self._mutex:
                mate.mate = pinned.mate = None
            if claim.mode is Mode.WRITE:
                self._records[pinned.conn] = (mate.claim.name, mate.claim.owner, mate.claim.mode)
        elif mate is not None:  # the connection is closed next, and the other holding goes with it
            self._lose(mate.claim, mate, "its connection failed or lost the lock as the other one was released")
            await self._close_quietly(pinned.conn)
        elif ok:
            await self._give_back_dedicated(pinned.conn)
        else:
            await self._close_quietly(pinned.conn)
        return ok

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        out: list[bool] = []
        checked: dict[int, bool] = {}  # a downgrade's pair shares its connection: one check serves both
        for claim in claims:
            with self._mutex:
                pinned = self._pinned.get(claim.token)
                releasing = claim.token in self._releasing
            if releasing:  # its owner is releasing it right now: release() tells the outcome
                out.append(True)
                continue
            ok = False
            if pinned is not None and pinned.mate is not None and id(pinned.conn) in checked:
                ok = checked[id(pinned.conn)]
            elif pinned is not None:
                try:
                    with Budget(CHECK_SHARE * claim.ttl):  # a silent pinned connection: this holding is lost
                        ok = checked[id(pinned.conn)] = await self._check(pinned, claim.ttl)
                except BaseException:  # cancelled mid-check: the connection is closed, and the lock with it
                    self._drop(pinned, "its connection's check was cancelled")
                    await self._close_quietly(pinned.conn)
                    raise
            if not ok and pinned is not None and claim.token not in self._releasing:
                self._drop(pinned, "its connection failed, timed out or no longer holds the lock")
                await self._close_quietly(pinned.conn)
            out.append(ok or claim.token in self._releasing)
        return out

    async def request_release(self, name: str, reason: str) -> bool:
        return await self.admin.request_release(name, reason)

    async def holds(self, claim: Claim) -> bool:
        with self._mutex:
            pinned = self._pinned.get(claim.token)
        if pinned is None:
            return False
        try:
            return await self._check(pinned, pinned.ttl)
        except Exception as exc:  # a dead connection holds nothing
            if not self._db_error(exc):
                raise
            return False

    async def inspect(self, name: str) -> LockInfo | None:
        infos = await self.admin.locks([name], "")
        return infos[0] if infos else None

    async def list(self, prefix: str) -> list[LockInfo]:
        return await self.admin.locks(None, prefix)

    async def break_lock(self, name: str) -> bool:
        return await self.admin.break_lock(name)

    async def aclose(self) -> None:
        await super().aclose()
        with self._mutex:
            pinned, self._pinned = list(self._pinned.values()), {}
        for p in pinned:
            await self._close_quietly(p.conn)
