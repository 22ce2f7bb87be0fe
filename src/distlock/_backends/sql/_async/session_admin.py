"""What ``inspect``, ``list``, ``break_lock`` and ``request_release`` read and do in the connection-bound mode
(``session.py``, and its row-lock variant ``rowlock.py``): every connection's holdings, not only this store's.

The holders are the mode's holder rows (``SessionMode._holder_rows``: the records joined with what the server
says each connection holds now, ``sql/session.py``'s ``session_holders``); a connection holding a lock without
a record of ours (another application's plain lock) shows as ``<db>:connection:<id>``. A break ends the
holders' connections from the server side; a release request goes into the holder records, where each
holder's next check reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .... import _rt_async as rt
from ...._core import ids
from ...._core.types import HolderInfo, LockInfo, Mode, lock_kind
from ...._errors import BackendError, UnsupportedFeature
from .. import stmt as st

if TYPE_CHECKING:
    from .session import SessionMode

log = logging.getLogger("distlock")


class SessionAdmin:
    """The admin side of one session-mode store (its ``admin``); the statements are the mode's hooks."""

    def __init__(self, mode: SessionMode) -> None:
        self._mode = mode

    async def request_release(self, name: str, reason: str) -> bool:
        """A release request into the holder record of each connection that holds ``name`` now; its next check
        (every ttl/3) reads it back."""
        m = self._mode
        if m._asked_in() is None:
            raise UnsupportedFeature(
                "release requests in session mode need the holder records of MariaDB >= 10.5 or PostgreSQL "
                f"(and the asked column of {m.prefix}_session_holders): use mode=lease, the default",
                name=name,
                backend=m.scheme,
            )
        stmt = m._ask_stmt(name, f"{ids.new_token()[:12]}|{reason}")
        r: st.Result = await m._tx(lambda: st.single(stmt), tx=False)
        return r.rowcount > 0

    async def locks(self, names: Sequence[str] | None, prefix: str) -> list[LockInfo]:
        """Live holders: records whose connection still holds the lock; a connection holding it without
        a record of its own (another application's plain lock) shows as ``<db>:connection:<id>``."""
        rows = await self._mode._holder_rows(names, prefix)
        ours: dict[str, dict[tuple[int, bool], HolderInfo]] = {}
        foreign: dict[str, dict[int, HolderInfo]] = {}
        for name, owner, mode, fence, conn_id, holder, holder_mode in rows:
            if holder is None:  # let go between the record's read and the server's answer: nobody holds it now
                continue
            n, h = str(name), int(holder)
            shared = str(holder_mode).lower().startswith("share")
            if conn_id is not None and int(conn_id) == h:
                if mode == Mode.WRITE.value and shared:
                    # a downgrade's read beside its write: its fence is the record's (``session_holders``)
                    read = HolderInfo(str(owner), None if fence is None else int(fence), Mode.READ.value, None)
                    ours.setdefault(n, {})[h, True] = read
                    continue
                # no fence: granted a moment ago, its fence not written yet (``session_holders``)
                info = HolderInfo(str(owner), None if fence is None else int(fence), str(mode), None)
                ours.setdefault(n, {})[h, False] = info
            else:
                label = f"{self._mode.dialect.name}:connection:{h}"
                foreign.setdefault(n, {})[h] = HolderInfo(label, None, "read" if shared else "lock", None)
        out = []
        for n in sorted(set(ours) | set(foreign)):
            mine = ours.get(n, {})
            pids = {k[0] for k in mine}
            holders = [*mine.values(), *(v for k, v in foreign.get(n, {}).items() if k not in pids)]
            modes = {x.mode for x in holders}
            kind = lock_kind(Mode.READ) if modes & {"read", "write"} else "lock"
            out.append(LockInfo(n, kind, tuple(holders), None))
        return out

    async def break_lock(self, name: str) -> bool:
        """End every connection that holds ``name``'s lock (this store's holdings on them are lost), and wait
        a moment for the server to let go of the lock."""
        m = self._mode
        rows = await m._holder_rows([name], "")
        if not rows:
            return False
        holders = {int(row[5]) for row in rows if row[5] is not None}
        with m._mutex:
            mine = [t for t, p in m._pinned.items() if p.claim.name == name and p.conn_id in holders]
        for token in mine:
            pinned = m._unpin(token)
            if pinned is not None:
                await m._close_quietly(pinned.conn)
                m.lost(token, "broken by an admin (break_lock)")
        await self._kill(sorted(holders))
        for _ in range(100):  # a terminated session lets go of its locks a moment later
            if not await m._holder_rows([name], ""):
                break
            await rt.sleep(0.02)
        return True

    async def _kill(self, conn_ids: Sequence[int]) -> None:
        """End the connections that hold a lock, from the server side."""
        m = self._mode
        for cid in conn_ids:
            stmt = st.Stmt(m.driver.kill_sql, (int(cid),))
            try:
                await m._tx(lambda stmt=stmt: st.single(stmt), tx=False)  # type: ignore[misc]
            except BackendError as exc:
                log.debug("could not end connection %s: %s", cid, exc)
