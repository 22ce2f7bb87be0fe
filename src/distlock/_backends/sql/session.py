"""SQL of the connection-bound (session) mode of MySQL/MariaDB and PostgreSQL.

No I/O: statements only (the backend class is ``_async/session.py``). MySQL's row-lock variant has its
own in ``rowlock.py`` (its holder records are this mode's table); the lease-table mode's statements are in
``lease*.py``, the statement machinery in ``stmt.py``; the dialects in ``dialects.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from ..._core.types import Claim, Mode
from .dialects import Dialect
from .names import BELL_PREFIX, advisory_key, get_lock_name, name_filter, name_key
from .rowlock import ROW_MARK
from .stmt import Stmt, to_int

# -- connection-bound (session) mode ---------------------------------------------------------------------
# One round trip per acquire and one per release. Fences come from one global SEQUENCE ``<prefix>_fence_seq``
# (PostgreSQL; MariaDB >= 10.5): it never goes down and survives restarts, so it increases per name too; it is
# drawn in the acquire's statement only once the lock was granted. ``inspect`` shows a connection as ours
# (owner, mode, name) from its holder record in ``<prefix>_session_holders``, keyed by connection id (an
# UNLOGGED table on PostgreSQL, a non-transactional Aria table on MariaDB: no redo log on the lock path), and
# only while that connection holds the record's lock.
#
# PostgreSQL: the fence of a holding is in its connection's ``application_name`` (``distlock|<fence>``, set by
# the acquire's statement, put back to ``distlock`` by the release's; ``pg_stat_activity`` shows it to every
# role), and the record is written only when what it says changes (another name, owner or mode on that
# connection): a loop on one lock writes no row, its acquire is a bare SELECT. A record stays while its
# connection lives (clean-up: connections that are gone).
#
# MariaDB has no per-connection value another session can read without performance_schema: the fence goes
# into ``<prefix>_session_fences`` (conn_id, fence), a MEMORY table of two integers (no redo log, no row
# format to build), with the lock, in one ``INSERT ... SELECT ... WHERE GET_LOCK(...) = 1 ON DUPLICATE KEY
# UPDATE`` whose answer (rows changed, ``LAST_INSERT_ID``) says whether it was taken and its fence. The record
# is written as on PostgreSQL, only when it changes, in front of the lock in the same round trip; the
# connection then also takes its marker lock ``distlock-bell:conn:<id>`` (once; the server lets it go with
# the connection), by which the clean-up tells a live connection's record from a gone one's.
#
# Portable layout (MySQL without sequences or RETURNING): the fence row of ``<prefix>_fences`` is bumped and
# carries the last holder's lock key, owner, mode and connection id; a multi-statement
# (``GET_LOCK``; conditional upsert; ``SELECT LAST_INSERT_ID()``).

#: PostgreSQL: what a pinned connection's ``application_name`` is while it holds nothing (the driver's), and
#: what the fence of its holding follows while it holds one
APP_NAME = "distlock"
FENCE_MARK = APP_NAME + "|"
#: MariaDB: the GET_LOCK name a connection with a holder record keeps for its whole life (SQL, of ``conn_id``)
_MARK = f"CONCAT('{BELL_PREFIX}conn:', {{}})"
#: SQL: the fence in the ``application_name`` of ``pg_stat_activity`` row ``a``, or NULL
_APP_FENCE = (
    f"CASE WHEN a.application_name ~ '^{APP_NAME}[|][0-9]{{1,19}}$' THEN substr(a.application_name, "
    f"{len(FENCE_MARK) + 1})::bigint END"
)


def session_schema(dialect: Dialect, p: str, fast: bool) -> tuple[str, ...]:
    if not fast:
        return ()
    cols = (
        "conn_id BIGINT NOT NULL PRIMARY KEY, name_key CHAR(64) NOT NULL, name TEXT NOT NULL, "
        "lock_key VARCHAR(64) NOT NULL, owner VARCHAR(255) NOT NULL, mode VARCHAR(16) NOT NULL, "
        "fence BIGINT NOT NULL, asked TEXT NULL"
    )
    if dialect.name == "mysql":
        return (
            f"CREATE SEQUENCE IF NOT EXISTS {p}_fence_seq",
            f"CREATE TABLE IF NOT EXISTS {p}_session_holders ({cols}, KEY {p}_session_holders_name (name_key)) "
            "ENGINE=Aria TRANSACTIONAL=0 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        )
    return (
        f"CREATE SEQUENCE IF NOT EXISTS {p}_fence_seq",
        f"CREATE UNLOGGED TABLE IF NOT EXISTS {p}_session_holders ({cols})",
        f"CREATE INDEX IF NOT EXISTS {p}_session_holders_name ON {p}_session_holders (name_key)",
    )


def session_mode_schema(dialect: Dialect, p: str, fast: bool) -> tuple[str, ...]:
    """What the session mode alone needs besides ``session_schema`` (made by session-mode stores only, so a
    lease-mode store of an earlier deployment opens without CREATE): MariaDB's fence table."""
    if dialect.name != "mysql" or not fast:
        return ()
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_session_fences (conn_id BIGINT UNSIGNED NOT NULL PRIMARY KEY, "
        "fence BIGINT NOT NULL) ENGINE=MEMORY",
    )


def session_lock_key(dialect: Dialect, name: str) -> str:
    """What the server locks: the GET_LOCK name (MySQL) or the advisory key as text (PostgreSQL)."""
    return get_lock_name(name) if dialect.name == "mysql" else str(advisory_key(name))


# The statements below depend on the name, mode and owner of a claim, never on its token: a holder that takes
# the same lock again (the common loop) gets the very same Stmt back instead of hashing the name twice and
# formatting the SQL again. Stmt is frozen, so sharing it is safe; the cache is bounded.
_CACHE = 1024


def session_acquire(
    dialect: Dialect, p: str, claim: Claim, wait: float | None, idle_timeout: float | None, fast: bool,
    recorded: bool = False,
) -> Stmt:  # fmt: skip
    """Try (``wait=None``) or wait up to ``wait`` seconds for the lock; the answer is read by
    ``session_acquired``. ``idle_timeout``: set the connection's idle timeout (the session lease) too.
    ``recorded``: the connection's holder record already names this claim's name, owner and mode, so the
    statement writes none (PostgreSQL: no row at all; MariaDB: the fence's)."""
    return _session_acquire(dialect, p, claim.name, claim.mode, claim.owner, wait, idle_timeout, fast, recorded)


@lru_cache(maxsize=_CACHE)
def _session_acquire(
    dialect: Dialect, p: str, name: str, mode: Mode, owner: str, wait: float | None, idle_timeout: float | None,
    fast: bool, recorded: bool,
) -> Stmt:  # fmt: skip
    key = session_lock_key(dialect, name)
    owner = owner[:255]
    nk = name_key(name)
    if dialect.name == "mysql":
        prefix = "" if idle_timeout is None else f"SET SESSION wait_timeout = {max(1, math.ceil(idle_timeout))}; "
        secs = 0 if wait is None else wait
        if fast:
            # the record, when it changes, goes first: it is shown only while its connection holds its lock
            record: tuple[str, tuple[object, ...]] = ("", ())
            if not recorded:
                mark = _MARK.format("CONNECTION_ID()")
                record = (
                    f"REPLACE INTO {p}_session_holders (conn_id, name_key, name, lock_key, owner, mode, fence) "
                    f"VALUES (CONNECTION_ID(), %s, %s, %s, %s, %s, 0); "
                    f"DO IF(IS_USED_LOCK({mark}) = CONNECTION_ID(), 0, GET_LOCK({mark}, 0)); ",
                    (nk, name, key, owner, mode.value),
                )
            fence = (
                f"INSERT INTO {p}_session_fences (conn_id, fence) SELECT CONNECTION_ID(), "
                f"LAST_INSERT_ID(NEXTVAL({p}_fence_seq)) FROM DUAL WHERE "
            )
            again = " ON DUPLICATE KEY UPDATE fence = VALUES(fence)"
            if wait is None:  # GET_LOCK(name, 0) never blocks: one statement (its answer: rows, LAST_INSERT_ID)
                return Stmt(f"{prefix}{record[0]}{fence}GET_LOCK(%s, 0) = 1{again}", (*record[1], key))
            # A blocking GET_LOCK must not run inside the INSERT: that would hold the fence table's lock. The
            # connection's fence of before is cleared first, so the moment between the grant and the INSERT
            # shows no fence rather than that one
            return Stmt(
                f"{prefix}{record[0]}UPDATE {p}_session_fences SET fence = 0 WHERE conn_id = CONNECTION_ID(); "
                f"SELECT GET_LOCK(%s, %s); {fence}IS_USED_LOCK(%s) = CONNECTION_ID(){again}",
                (*record[1], key, secs, key),
            )
        return Stmt(
            f"{prefix}SELECT GET_LOCK(%s, %s); "
            f"INSERT INTO {p}_fences (name_key, name, fence, lock_key, owner, mode, conn_id) "
            "SELECT %s, %s, LAST_INSERT_ID(1), %s, %s, %s, CONNECTION_ID() FROM DUAL "
            "WHERE IS_USED_LOCK(%s) = CONNECTION_ID() "
            "ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), lock_key = VALUES(lock_key), "
            "owner = VALUES(owner), mode = VALUES(mode), conn_id = VALUES(conn_id); "
            "SELECT LAST_INSERT_ID(), CONNECTION_ID()",
            (key, secs, nk, name, key, owner, mode.value, key),
        )
    shared = "_shared" if mode is Mode.READ else ""
    ms = "0" if idle_timeout is None else str(max(1, math.ceil(idle_timeout * 1000)))
    if wait is None:
        lock = f"pg_try_advisory_lock{shared}(%s::bigint)"
        args: tuple[object, ...] = (ms, int(key))
    else:
        # set_config(lock_timeout) is evaluated before the lock: a target list is computed in its order
        lock = f"(pg_advisory_lock{shared}(%s::bigint))::text = ''"
        args = (ms, f"{max(1, int(wait * 1000))}ms", int(key))
    lt = "" if wait is None else "set_config('lock_timeout', %s, false) AS lt, "
    # the fence is drawn only once the lock is granted (a fence drawn before a wait could be passed by one
    # drawn later by a holder that got in first), and shown as the connection's application_name
    fence = f"set_config('application_name', '{FENCE_MARK}' || nextval('{p}_fence_seq'), false)"
    if recorded:
        return Stmt(
            f"SELECT set_config('idle_session_timeout', %s, false) AS it, {lt}CASE WHEN {lock} THEN {fence} END, "
            "pg_backend_pid()",
            args,
        )
    return Stmt(
        f"WITH l AS (SELECT set_config('idle_session_timeout', %s, false) AS it, {lt}{lock} AS got), "
        f"g AS (SELECT {fence} AS app FROM l WHERE l.got) "
        f"INSERT INTO {p}_session_holders AS h (conn_id, name_key, name, lock_key, owner, mode, fence) "
        "SELECT pg_backend_pid(), %s, %s, %s, %s, %s, 0 FROM g "
        "ON CONFLICT (conn_id) DO UPDATE SET name_key = EXCLUDED.name_key, name = EXCLUDED.name, "
        "lock_key = EXCLUDED.lock_key, owner = EXCLUDED.owner, mode = EXCLUDED.mode, fence = 0, "
        "asked = NULL RETURNING (SELECT app FROM g), h.conn_id",
        (*args, nk, name, key, owner, mode.value),
    )


def session_acquired(
    dialect: Dialect, sets: Sequence[Sequence[tuple[object, ...]]], fast: bool, conn_id: int | None = None
) -> tuple[int, int] | None:
    """(fence, connection id) from the result sets of ``session_acquire``, or None if not taken. MariaDB's
    (``fast``): the last set is the fence INSERT's answer (rows changed, ``LAST_INSERT_ID``), and the
    connection id is the driver's (``conn_id``)."""
    if dialect.name == "mysql" and not fast:
        # result sets: GET_LOCK's, then (LAST_INSERT_ID(), CONNECTION_ID()); SET and INSERT return none
        if len(sets) < 2 or not sets[0] or sets[0][0][0] != 1:
            return None
    if not sets or not sets[-1]:
        return None
    if dialect.name == "mysql" and fast:
        changed, fence = sets[-1][0]
        if not changed or conn_id is None:
            return None
        return to_int(fence), conn_id
    row = sets[-1][0]
    got, holder = row[-2], row[-1]
    if got is None:  # PostgreSQL's SELECT: the lock was not granted
        return None
    if isinstance(got, str):  # PostgreSQL: the application_name the statement set
        got = got[len(FENCE_MARK):]
    return to_int(got), to_int(holder)


def session_unlock(dialect: Dialect, claim: Claim) -> Stmt:
    return _session_unlock(dialect, claim.name, claim.mode)


@lru_cache(maxsize=_CACHE)
def _session_unlock(dialect: Dialect, name: str, mode: Mode) -> Stmt:
    key = session_lock_key(dialect, name)
    if dialect.name == "mysql":
        return Stmt("SELECT RELEASE_LOCK(%s)", (key,))
    shared = "_shared" if mode is Mode.READ else ""
    # the fence goes from the application_name with the lock: the connection's next grant, until its statement
    # sets the new fence, shows none rather than this one
    return Stmt(
        f"SELECT pg_advisory_unlock{shared}(%s::bigint), set_config('application_name', '{APP_NAME}', false)",
        (int(key),),
    )


# -- a downgrade (PostgreSQL): the write holder's connection takes the shared lock too -------------------------
# PostgreSQL grants a session that holds a key's exclusive advisory lock the shared one at once, even ahead of
# sessions queued for the exclusive one (it would deadlock with them otherwise), and each is let go of by its
# own unlock. The two holdings share the connection; its holder record and ``application_name`` speak for
# the write while it lasts, then for the read. Meanwhile the read's fence is in the record's ``fence`` column
# (otherwise 0 on PostgreSQL), which ``session_holders`` shows for the shared lock of a write's connection.

#: how long a downgrade's shared lock may wait: granted at once, so this bounds only a server that would not
#: (and stays under the server's ``deadlock_timeout``, 1 s by default)
DOWNGRADE_WAIT = 0.5


def session_downgrade(dialect: Dialect, p: str, claim: Claim) -> Stmt:
    """The shared lock of ``claim``'s name on the connection that holds its exclusive one, and the read's own
    fence, written into the connection's record; the answer is read by ``session_acquired`` (no grant: the
    lock timeout's error, no rows)."""
    key = int(session_lock_key(dialect, claim.name))
    ms = f"{int(DOWNGRADE_WAIT * 1000)}ms"
    return Stmt(
        "WITH l AS (SELECT set_config('lock_timeout', %s, true) AS lt, CASE WHEN "
        f"(pg_advisory_lock_shared(%s::bigint))::text = '' THEN nextval('{p}_fence_seq') END AS f), "
        f"r AS (UPDATE {p}_session_holders h SET fence = l.f FROM l WHERE h.conn_id = pg_backend_pid() "
        "AND l.f IS NOT NULL RETURNING 1) SELECT l.f, pg_backend_pid() FROM l",
        (ms, key),
    )


def session_unlock_one(dialect: Dialect, p: str, claim: Claim, rest: Claim, rest_fence: int) -> Stmt:
    """Let go of ``claim``'s lock alone while ``rest``, the other holding on its connection (a downgrade's
    read and its write), stays held. The write's release hands the connection's record and fence to the read."""
    key = int(session_lock_key(dialect, claim.name))
    if claim.mode is Mode.READ:
        return Stmt(
            f"WITH r AS (UPDATE {p}_session_holders SET fence = 0 WHERE conn_id = pg_backend_pid() RETURNING 1) "
            "SELECT pg_advisory_unlock_shared(%s::bigint), (SELECT count(*) FROM r)",
            (key,),
        )
    return Stmt(
        f"WITH r AS (UPDATE {p}_session_holders SET mode = %s, fence = 0 WHERE conn_id = pg_backend_pid() "
        "RETURNING 1) SELECT pg_advisory_unlock(%s::bigint), set_config('application_name', %s, false), "
        "(SELECT count(*) FROM r)",
        (rest.mode.value, key, f"{FENCE_MARK}{rest_fence}"),
    )


def _pg_key_match(alias: str, key_sql: str) -> str:
    return (
        f"{alias}.locktype = 'advisory' AND {alias}.granted AND {alias}.objsubid = 1 "
        f"AND {alias}.classid::bigint = (({key_sql} >> 32) & 4294967295) "
        f"AND {alias}.objid::bigint = ({key_sql} & 4294967295)"
    )


def session_check(dialect: Dialect, claim: Claim, idle_timeout: float | None, asked_in: str | None = None) -> Stmt:
    """Does this very connection still hold the lock? (Also renews its idle timeout, the session lease.) With
    ``asked_in`` (the fast layout's ``<prefix>_session_holders``), a second column: the release request made
    to this connection's holding (``session_ask``), read in the same statement."""
    return _session_check(dialect, claim.name, idle_timeout, asked_in)


def _asked(dialect: Dialect, asked_in: str | None) -> str:
    """The release request of this connection's holder record, as a second column (or nothing): '' for none,
    NULL if the connection has no record (a store of an earlier version's clean-up deleted it)."""
    if asked_in is None:
        return ""
    me = "CONNECTION_ID()" if dialect.name == "mysql" else "pg_backend_pid()"
    return f", (SELECT COALESCE(a.asked, '') FROM {asked_in} a WHERE a.conn_id = {me})"


@lru_cache(maxsize=_CACHE)
def _session_check(dialect: Dialect, name: str, idle_timeout: float | None, asked_in: str | None) -> Stmt:
    key = session_lock_key(dialect, name)
    if dialect.name == "mysql":
        prefix = "" if idle_timeout is None else f"SET SESSION wait_timeout = {max(1, math.ceil(idle_timeout))}; "
        return Stmt(f"{prefix}SELECT IS_USED_LOCK(%s) = CONNECTION_ID(){_asked(dialect, asked_in)}", (key,))
    ms = "0" if idle_timeout is None else str(max(1, math.ceil(idle_timeout * 1000)))
    return Stmt(
        "SELECT set_config('idle_session_timeout', %s, false) IS NOT NULL AND EXISTS (SELECT 1 FROM pg_locks l "
        f"WHERE l.pid = pg_backend_pid() AND {_pg_key_match('l', '%s::bigint')}){_asked(dialect, asked_in)}",
        (ms, int(key), int(key)),
    )


def session_ask(dialect: Dialect, p: str, name: str, request: str) -> Stmt:
    """A release request ("<id>|<reason>") into the holder record of every connection that holds ``name``'s
    lock now (the fast layout); a record whose connection let go is not written. The record's connection
    reads it back with its next check; its next acquire, or the clean-up of records whose connection holds
    nothing, clears it."""
    key = session_lock_key(dialect, name)
    # The record outlives the holding (it is rewritten only when it changes): the request names the fence it
    # was made to, and a later holding of the connection, with another fence, does not take it
    if dialect.name == "mysql":
        return Stmt(
            f"UPDATE {p}_session_holders h JOIN {p}_session_fences g ON g.conn_id = h.conn_id "
            "SET h.asked = CONCAT(g.fence, '|', %s) WHERE h.name_key = %s AND h.lock_key = %s "
            "AND g.fence > 0 AND IS_USED_LOCK(h.lock_key) = h.conn_id",
            (request, name_key(name), key),
        )
    return Stmt(
        f"UPDATE {p}_session_holders h SET asked = ({_APP_FENCE})::text || '|' || %s FROM pg_stat_activity a "
        f"WHERE a.pid = h.conn_id AND {_APP_FENCE} IS NOT NULL AND h.name_key = %s AND h.lock_key = %s AND EXISTS "
        f"(SELECT 1 FROM pg_locks l WHERE l.pid = h.conn_id AND {_pg_key_match('l', 'h.lock_key::bigint')})",
        (request, name_key(name), key),
    )


def session_request(asked: object, fence: int) -> str | None:
    """The release request ("<id>|<reason>") a check read from its connection's record, if it was made to the
    holding of ``fence`` (``session_ask``: "<fence>|<id>|<reason>")."""
    if not asked:
        return None
    made_to, _, request = str(asked).partition("|")
    return request if made_to == str(fence) else None


def session_holders(dialect: Dialect, p: str, names: Sequence[str] | None, prefix: str, fast: bool) -> Stmt:
    """Rows (name, owner, mode, fence, recorded conn id, holding conn id, holding mode) of held names."""
    table = f"{p}_session_holders" if fast else f"{p}_fences"
    where, args = name_filter(names, prefix, "f")
    if dialect.name == "mysql":
        # MariaDB: the fence of the connection's fence row (0, none: between a waiter's grant and its INSERT);
        # a record of an earlier version carries its own
        fence = "f.fence"
        if fast:
            table += f" f LEFT JOIN {p}_session_fences g ON g.conn_id = f.conn_id"
            fence = "COALESCE(NULLIF(g.fence, 0), NULLIF(f.fence, 0))"
        else:
            table += " f"
        return Stmt(
            f"SELECT f.name, f.owner, f.mode, {fence}, f.conn_id, IS_USED_LOCK(f.lock_key), 'lock' "
            f"FROM {table} WHERE {where} AND f.lock_key IS NOT NULL AND IS_USED_LOCK(f.lock_key) IS NOT NULL "
            "ORDER BY f.name",
            args,
        )
    # every connection that holds the key: ours show their record and the fence of their application_name
    # (NULL for the moment between a grant and its statement's end; a downgrade's read beside its write: the
    # record's), others (another application) their pid
    return Stmt(
        f"SELECT f.name, f.owner, f.mode, CASE WHEN f.mode = 'write' AND l.mode = 'ShareLock' AND l.pid = f.conn_id "
        f"THEN NULLIF(f.fence, 0) ELSE {_APP_FENCE} END, f.conn_id, l.pid, l.mode "
        f"FROM {table} f JOIN pg_locks l ON {_pg_key_match('l', 'f.lock_key::bigint')} "
        "LEFT JOIN pg_stat_activity a ON a.pid = l.pid AND a.pid = f.conn_id "
        f"WHERE {where} ORDER BY f.name, l.pid",
        args,
    )


def session_cleanup(dialect: Dialect, p: str, fast: bool) -> Stmt | None:
    """Delete holder records of connections that are gone (run at open and close): a live one's record stays
    between its holdings (its next acquire of the same name, owner and mode writes none)."""
    if not fast:
        return None
    if dialect.name == "mysql":
        # a connection is gone when it no longer keeps its marker lock (a record of an earlier version, which
        # took none: when it no longer holds the record's lock); a row-lock holder's record (``ROW_MARK``)
        # takes no GET_LOCK: it goes once its connection is gone. Then the fence rows with no record
        mark = _MARK.format("conn_id")
        return Stmt(
            f"DELETE FROM {p}_session_holders WHERE (lock_key <> '{ROW_MARK}' AND (IS_USED_LOCK(lock_key) IS NULL "
            f"OR IS_USED_LOCK(lock_key) <> conn_id) AND (IS_USED_LOCK({mark}) IS NULL OR IS_USED_LOCK({mark}) "
            f"<> conn_id)) OR (lock_key = '{ROW_MARK}' AND conn_id NOT IN "
            "(SELECT ID FROM information_schema.PROCESSLIST)); "
            f"DELETE FROM {p}_session_fences WHERE conn_id NOT IN (SELECT conn_id FROM {p}_session_holders)"
        )
    return Stmt(
        f"DELETE FROM {p}_session_holders h WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a "
        "WHERE a.pid = h.conn_id)"
    )
