"""The grant a MariaDB waiter gets from the server behind its bell wait, and the end of a bell wait that did not
come back (``TxOps`` of ``lease_tx.py``; the bell itself is ``_backends/mysql/_async/lease_mode.py``'s).

No I/O: statements only. Why the grant's condition is the arbiter's rule on a narrower view, and why a bell
wait's KILL is conditional: docs/sql.md ("The server's grant"), ``docs/models/sql_bell_orphan.pml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._core.types import Claim, Mode
from .dialects import MYSQL_IDLE_BEFORE
from .lease import LAYOUT
from .stmt import Stmt

if TYPE_CHECKING:  # (lease_tx imports this module)
    from .lease_tx import TxOps


def grants_on_server(ops: TxOps, claim: Claim, key: str) -> bool:
    """Whether a try behind a bell wait may be granted by the server in that very round trip
    (``server_grant``): an exclusive kind (its rule: no holder; if fair, nobody ahead), a fence from a
    sequence (MariaDB), and nothing to notify. Other claims (readers, weighted semaphores, MySQL's
    ticket fences) are decided in Python as every try is."""
    return (
        ops.sequences
        and claim.mode in (Mode.EXCLUSIVE, Mode.WRITE)
        and claim.companion is None
        and not ops._notify_stmt(key)
    )

def server_grant(ops: TxOps, claim: Claim, key: str, name_lock: str) -> tuple[str, tuple[object, ...]]:
    """The grant ``decide`` would make for an exclusive claim, as one conditional INSERT sent behind the
    bell wait with the name's lock and the clock, so that only the answer follows the wake-up; then the
    transaction's COMMIT. The condition is the arbiter's rule on a narrower view (docs/sql.md, "The
    server's grant"): no holder row at all (an expired one is left to the try in Python, which deletes it
    under the renewal's row lock) and, if fair, no live queue entry ahead of the claim's own live one (or
    none live at all, when its own has run out). Granted: the name's lock goes, the bell stays (the new
    holder's), the session's idle timeout is put back. Refused with the name's lock: both stay, and the try
    goes on as any does (its read, then ``decide``) in a new transaction. Not locked: everything goes."""
    p = ops.p
    cond, cp = f"NOT EXISTS (SELECT 1 FROM {p}_holders WHERE name_key = %s)", [key]
    if claim.fair:
        cond += (
            f" AND NOT EXISTS (SELECT 1 FROM {p}_queue q WHERE q.name_key = %s AND q.expires_at > @distlock_now "
            f"AND q.token <> %s AND q.seq < COALESCE((SELECT m.seq FROM {p}_queue m WHERE m.token = %s "
            "AND m.expires_at > @distlock_now), 9223372036854775807))"
        )
        cp += [key, claim.token, claim.token]
    cols, first = ops._holder_columns(claim, key)
    # the condition goes into a variable first: an INSERT whose SELECT reads its own table copies the rows
    # through a temporary table (the fence is read back with LASTVAL). A claim that never queues
    # (``queues``) has no entry to delete
    queued = ops.queues(claim)
    drop = f"DELETE FROM {p}_queue WHERE token = %s AND @distlock_free; " if queued else ""
    sql = (
        f"SET @distlock_free = COALESCE(@distlock_locked = 1 AND {cond}, 0); "
        f"{cols}SELECT %s, %s, %s, %s, %s, NEXTVAL({p}_fence_seq), @distlock_now + %s, @distlock_now, "
        f"{LAYOUT} FROM DUAL WHERE @distlock_free; {drop}"
        f"COMMIT; SET SESSION wait_timeout = CASE WHEN @distlock_free = 0 AND @distlock_locked = 1 "
        f"THEN @@session.wait_timeout ELSE {MYSQL_IDLE_BEFORE} END, @distlock_let_go = CASE WHEN @distlock_free "
        f"THEN RELEASE_LOCK('{name_lock}') WHEN @distlock_locked = 1 THEN 0 ELSE RELEASE_ALL_LOCKS() END"
    )
    return sql, (*cp, *first, claim.ttl, *((claim.token,) if queued else ()))

def end_bell_wait(ops: TxOps, conn_id: int, key: str, bell: str) -> Stmt:
    """MariaDB: end the connection ``conn_id`` of a bell wait on ``key`` whose call did not come back
    (``server_grant`` may still run there), only while it is that wait: running its statement (the bell
    wait's, ``@distlock_rang``) or holding the name's bell or lock. A connection id is reused after a server
    restart, and a KILL made later (the link was down) must not end another client's connection; at worst it
    ends a connection of this name's bell or lock (a wake-up or a try made again). One statement (a
    compound one): nothing runs between the check and the KILL."""
    name_lock = str(ops._lock_name(key).params[0])
    return Stmt(
        "BEGIN NOT ATOMIC IF IS_USED_LOCK(%s) = %s OR IS_USED_LOCK(%s) = %s OR EXISTS (SELECT 1 FROM "
        "information_schema.PROCESSLIST WHERE ID = %s AND INFO LIKE %s) THEN KILL CONNECTION %s; END IF; END",
        (bell, conn_id, name_lock, conn_id, conn_id, "%@distlock_rang%", conn_id),
    )
