#!/usr/bin/env python3
"""Where a MariaDB lease-mode hand-off goes: the bell hand-off rebuilt from bare statements, one part at a time.

    .venv/bin/python benchmarks/sql_handoff_parts.py [--rounds 4] [--seconds 3] [--mysql URL] [--only a,b,...]
    .venv/bin/python benchmarks/sql_handoff_parts.py --check-slot     # slot's take-over, case by case (no timing)

Two threads, each on its own PyMySQL connection, take strict turns (3 ms holds), as ``distlock bench``'s hand-off:
the holder keeps the bell (a ``GET_LOCK``); the waiter sends its bell wait, with whatever rides on it, and the
hand-off is timed from the holder's release call to the waiter's answer. The variants (every round runs each,
every other round in reverse order; a line per round with each p50 and its multiple of the raw one):

* ``raw``: the release is ``RELEASE_LOCK`` of the bell, the wait ``GET_LOCK`` (``sql_peers.py``'s raw row);
* ``lease``: the statements of the lease mode's hand-off on MariaDB (``TxOps.release_ringing`` and the bell wait
  with the server's grant, ``TxOps._server_grant``): the release deletes the holder row (a commit) and lets go
  of the bell; the woken waiter takes the name's lock, checks that no holder row is left, inserts its own with a
  fence from a sequence and commits (a second commit);
* ``no-delete``: ``lease`` without the release's ``DELETE`` (its commit off the path: what one commit fewer on
  the release side would leave; the waiter inserts without the check, and each holder's old row is deleted off
  the timed path);
* ``no-insert``: ``lease`` without the waiter's ``INSERT`` and ``COMMIT`` (the grant's commit off the path);
* ``locks``: ``lease`` without any table work: the bell, then the name's lock taken and let go (the
  multi-statement's round trip and the user locks alone);
* ``direct``: one commit per hand-off, the release's: one transaction deletes the holder's row and inserts the
  waiter's (the releaser knows it, as a direct hand-over's queue would tell it), then the bell goes; the
  woken waiter reads its row in the bell wait's round trip.

Two diagnostics: what the grant's check costs, and what fewer statements save (the same writes):

* ``no-delete-check``: ``no-delete`` with the grant's check (a read of the name's rows, by the name's index) made
  and ignored;
* ``lease-min``: ``lease`` in fewer statements: the release's ``DELETE ... RETURNING`` tells whether the row was
  live, and the grant is autocommit (no ``BEGIN``/``COMMIT`` statements).

Candidates for a hand-off whose path writes at most ONE InnoDB row (docs/bench.md, "MySQL lease hand-off: one
row write on the path, or none"). (a) and (b) mark a released row in a MEMORY table (``hp_released``: no redo, no
MVCC, lost at a restart, where a marked row just waits for its lease) before the bell, and the waiter counts
marked rows as gone:

* ``marker``: the release marks its row, lets the bell go, then deletes its row and its marker (the same round
  trip, after the wake-up); the waiter reads the name's markers in a statement BEFORE the one that reads its rows
  (a marker gone by then went after its row's ``DELETE`` committed) and inserts its own row if every row of the
  name is marked (it never touches the marked row: no row lock shared with the release's ``DELETE``);
* ``marker-late``: ``marker`` with the release's ``DELETE`` of its row and marker in a second round trip, sent
  once the first answered (off the hand-off's path as ``no-delete``'s);
* ``takeover``: as ``marker``, but the waiter takes the marked row over in place (an ``UPDATE`` of its token,
  the primary key, fence and lease end), and the release deletes its row (and marker) only if nobody took the
  bell at that instant; a waiter that finds the row gone inserts;
* ``slot``: the exclusive holder rows keyed by the name (``hp_slots``: one row per held name, found by name and
  token); the release marks its row and lets the bell go; the waiter's ONE statement after the name's lock is an
  ``INSERT ... ON DUPLICATE KEY UPDATE`` that inserts on a free name and, on the name's row, takes it over in
  place inside the duplicate key's row lock if it is marked or its lease is over (no key column changes: nothing
  left under the name for a later read to step over); the release's clean-up (its row by name and token, then its
  marker) is deferred until the waiter holds, as a library would defer it (a taken-over row has another token);
* ``rel-lock``: no marker table: the release takes a user lock named after its token before the bell and lets
  it go after its ``DELETE`` committed; a row whose token's lock is held counts as released (a refusal when the
  waiter's statement straddles that commit is counted as a refusal).

(c) no InnoDB row at all: the holder rows in a MEMORY table (``hp_mem_holders``), every write seen at once; a
restart empties it, and a MEMORY "epoch" row written once the server has been up longer than any lease gates
every grant (``hp_epoch``, written once here):

* ``mem-lease``: ``lease``'s statements on that table, the epoch in the grant's condition;
* ``mem-min``: ``lease-min``'s on it, the name's lock let go in the grant's ``INSERT ... RETURNING`` (a write
  seen at once needs no commit before it).

Each variant's refusals (the grant not made by the bell wait's statement: the slow path in a library) are
printed when there are any.

Not distlock's code path (no pool, no Python decision, no renewal): the statements' server and round-trip cost
alone. Without ``--mysql`` it starts a MariaDB (tools/servers/).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pymysql

ROOT = Path(__file__).resolve().parent.parent
HOLD = 0.003
T = "hp_holders"
NOW = "UNIX_TIMESTAMP(NOW(6))"
BELL = "hp-bell"
NAME = "hp-name"

SQ = "'"
M = "hp_released"  # the MEMORY table of released markers
#: the bell wait, then the name's lock and the clock
WAKE = (
    "SET @rang = GET_LOCK('hp-bell', 10); "
    f"SET @locked = CASE WHEN @rang = 1 THEN GET_LOCK('hp-name', 5) END, @now = {NOW}"
)
#: ``WAKE``, and the name's markers read once the name's lock is held, in a statement BEFORE the one that reads
#: its rows: a marker gone by then went after its row's DELETE had committed (the release deletes it last), so
#: that row is gone from the later read too
WAKE_MARKS = f"{WAKE}, @marks = COALESCE((SELECT GROUP_CONCAT(token) FROM {M} WHERE name_key = 'k'), '')"
UNMARKED = "FIND_IN_SET(token, @marks) = 0"
#: the release's first statements: the marker, written only if our row is live (its count: whether it was), then
#: the bell
MARK = (
    f"INSERT INTO {M} SELECT token, name_key FROM {T} WHERE token = '{{me}}' AND expires_at > {NOW}; "
    "SELECT ROW_COUNT(), RELEASE_LOCK('hp-bell')"
)


def grant(cond: str, table: str = T) -> str:
    """The bell wait's grant after ``WAKE``: the condition into a variable, an autocommit INSERT (its own commit,
    made while the name's lock is held), the name's lock let go."""
    return (
        f"SET @free = COALESCE(@locked = 1 AND {cond}, 0); INSERT INTO {table} (token, name_key, fence, expires_at) "
        "SELECT '{next}', 'k', NEXTVAL(hp_seq), @now + 60 FROM DUAL WHERE @free; SELECT @free, RELEASE_LOCK('hp-name')"
    )


#: ``rel-lock``'s condition: every row of the name has its release in flight (its token's user lock held)
UNRELEASING = f"NOT EXISTS (SELECT 1 FROM {T} WHERE name_key = 'k' AND IS_USED_LOCK(CONCAT('hp-rel-', token)) IS NULL)"
FREE = f"NOT EXISTS (SELECT 1 FROM {T} WHERE name_key = 'k')"
ALL_MARKED = f"NOT EXISTS (SELECT 1 FROM {T} WHERE name_key = 'k' AND {UNMARKED})"
#: the take-over in place: every row of the name marked, then one marked row's token, fence and lease end
#: rewritten by primary key (a row lock taken on the clustered record first, as the release's DELETE by token
#: takes it: no lock-order cycle); the row gone meanwhile (the release deleted it): an INSERT as on a free name
TAKEOVER = (
    f"SET @ok = COALESCE(@locked = 1 AND {ALL_MARKED}, 0), "
    f"@old = (SELECT token FROM {T} WHERE name_key = 'k' LIMIT 1); "
    f"UPDATE {T} SET token = '{{next}}', fence = NEXTVAL(hp_seq), expires_at = @now + 60 WHERE token = @old AND @ok; "
    f"SET @took = ROW_COUNT(); SET @free = COALESCE(@ok AND @took = 0 AND {ALL_MARKED}, 0); "
    f"INSERT INTO {T} (token, name_key, fence, expires_at) SELECT '{{next}}', 'k', NEXTVAL(hp_seq), @now + 60 "
    f"FROM DUAL WHERE @free; DELETE FROM {M} WHERE token = @old AND @took = 1; "
    "SELECT @took = 1 OR @free, RELEASE_LOCK('hp-name')"
)
#: variant -> (the release, the bell wait); ``{me}`` / ``{next}``: the holder's / the waiter's token
VARIANTS: dict[str, tuple[str, str]] = {
    "raw": ("DO RELEASE_LOCK('hp-bell')", "SELECT GET_LOCK('hp-bell', 10)"),
    "lease": (
        f"SET @live = (SELECT expires_at > {NOW} FROM {T} WHERE token = '{{me}}'); "
        f"DELETE FROM {T} WHERE token = '{{me}}'; SELECT COALESCE(@live, 0), RELEASE_LOCK('hp-bell')",
        "BEGIN; SET @rang = GET_LOCK('hp-bell', 10); "
        f"SET @locked = CASE WHEN @rang = 1 THEN GET_LOCK('hp-name', 5) END, @now = {NOW}; "
        f"SET @free = COALESCE(@locked = 1 AND NOT EXISTS (SELECT 1 FROM {T} WHERE name_key = 'k'), 0); "
        f"INSERT INTO {T} (token, name_key, fence, expires_at) SELECT '{{next}}', 'k', NEXTVAL(hp_seq), @now + 60 "
        "FROM DUAL WHERE @free; COMMIT; SELECT @free, RELEASE_LOCK('hp-name')",
    ),
    "no-delete": (
        "SELECT RELEASE_LOCK('hp-bell')",
        "BEGIN; SET @rang = GET_LOCK('hp-bell', 10); "
        f"SET @locked = CASE WHEN @rang = 1 THEN GET_LOCK('hp-name', 5) END, @now = {NOW}; "
        f"INSERT INTO {T} (token, name_key, fence, expires_at) SELECT '{{next}}', 'k', NEXTVAL(hp_seq), @now + 60 "
        "FROM DUAL WHERE @locked = 1; COMMIT; SELECT 1, RELEASE_LOCK('hp-name')",
    ),
    "no-insert": (
        f"SET @live = (SELECT expires_at > {NOW} FROM {T} WHERE token = '{{me}}'); "
        f"DELETE FROM {T} WHERE token = '{{me}}'; SELECT COALESCE(@live, 0), RELEASE_LOCK('hp-bell')",
        "SET @rang = GET_LOCK('hp-bell', 10); "
        f"SET @locked = CASE WHEN @rang = 1 THEN GET_LOCK('hp-name', 5) END, @now = {NOW}; "
        f"SET @free = COALESCE(@locked = 1 AND NOT EXISTS (SELECT 1 FROM {T} WHERE name_key = 'k'), 0); "
        "SELECT @free, RELEASE_LOCK('hp-name')",
    ),
    "locks": (
        "SELECT RELEASE_LOCK('hp-bell')",
        "SET @rang = GET_LOCK('hp-bell', 10); "
        f"SET @locked = CASE WHEN @rang = 1 THEN GET_LOCK('hp-name', 5) END, @now = {NOW}; "
        "SELECT @locked, RELEASE_LOCK('hp-name')",
    ),
    "direct": (
        "BEGIN; DO GET_LOCK('hp-name', 5); "
        f"DELETE FROM {T} WHERE token = '{{me}}'; INSERT INTO {T} (token, name_key, fence, expires_at) "
        f"VALUES ('{{next}}', 'k', NEXTVAL(hp_seq), {NOW} + 60); COMMIT; DO RELEASE_LOCK('hp-name'); "
        "SELECT RELEASE_LOCK('hp-bell')",
        f"SET @rang = GET_LOCK('hp-bell', 10); SELECT @rang, (SELECT fence FROM {T} WHERE token = '{{next}}')",
    ),
    "no-delete-check": ("SELECT RELEASE_LOCK('hp-bell')", f"{WAKE}; {grant(f'({FREE} OR 1)')}"),
    "marker": (
        f"{MARK}; DELETE FROM {T} WHERE token = '{{me}}'; DELETE FROM {M} WHERE token = '{{me}}'",
        f"{WAKE_MARKS}; {grant(ALL_MARKED)}",
    ),
    "marker-late": (MARK, f"{WAKE_MARKS}; {grant(ALL_MARKED)}"),
    "takeover": (
        f"{MARK}; DELETE FROM {T} WHERE token = '{{me}}' AND IS_USED_LOCK('hp-bell') IS NULL; "
        f"SET @gone = ROW_COUNT(); DELETE FROM {M} WHERE token = '{{me}}' AND @gone = 1",
        f"{WAKE_MARKS}; {TAKEOVER}",
    ),
    "rel-lock": (
        f"SELECT COALESCE((SELECT expires_at > {NOW} FROM {T} WHERE token = '{{me}}'), 0), "
        f"GET_LOCK('hp-rel-{{me}}', 0), RELEASE_LOCK('hp-bell'); DELETE FROM {T} WHERE token = '{{me}}'; "
        "DO RELEASE_LOCK('hp-rel-{me}')",
        f"{WAKE}; {grant(UNRELEASING)}",
    ),
}
S = "hp_slots"  # ``slot``: the exclusive holder rows keyed by the name (found by name and token: no other index)
#: ``slot``'s take-over condition, in the duplicate key's row lock: the row's token marked (its marker is read once
#: that lock is held: the release's clean-up deletes a marker only after its row's DELETE committed, which the lock
#: keeps from happening meanwhile) or its lease over (the row's latest version, a renewal in flight waited for);
#: into a variable by the first assignment, which every later one reads (the token, which it reads, last)
TAKE = f"@take := (EXISTS (SELECT 1 FROM {M} WHERE {M}.token = {S}.token) OR {S}.expires_at <= @now)"
VARIANTS["slot"] = (
    f"INSERT INTO {M} SELECT token, name_key FROM {S} WHERE name_key = 'k' AND token = '{{me}}' AND expires_at > {NOW}; "
    "SELECT ROW_COUNT(), RELEASE_LOCK('hp-bell')",
    f"{WAKE}; INSERT INTO {S} (name_key, token, fence, expires_at) SELECT 'k', '{{next}}', NEXTVAL(hp_seq), "
    f"@now + 60 FROM DUAL WHERE @locked = 1 ON DUPLICATE KEY UPDATE fence = IF({TAKE}, VALUES(fence), fence), "
    "expires_at = IF(@take, VALUES(expires_at), expires_at), token = IF(@take, VALUES(token), token); "
    "SELECT ROW_COUNT(), RELEASE_LOCK('hp-name')",
)
TM = "hp_mem_holders"  # ``mem-*``: the holder rows in a MEMORY table
E = "hp_epoch"  # a MEMORY row written once the server has been up longer than any lease (gone at a restart)
VARIANTS["mem-lease"] = (
    VARIANTS["lease"][0].replace(T, TM),
    f"{WAKE}; {grant(f'EXISTS (SELECT 1 FROM {E}) AND NOT EXISTS (SELECT 1 FROM {TM} WHERE name_key = {SQ}k{SQ})', TM)}",
)
VARIANTS["lease-min"] = (
    f"DELETE FROM {T} WHERE token = '{{me}}' RETURNING expires_at > {NOW}; SELECT RELEASE_LOCK('hp-bell')",
    f"{WAKE}; {grant(FREE)}",
)
#: ``mem-min``: ``lease-min`` on the MEMORY table, whose writes are seen at once (no MVCC, no commit): the name's
#: lock goes in the INSERT's RETURNING (refused, no row: it stays, as after the server's refusal today)
VARIANTS["mem-min"] = (
    VARIANTS["lease-min"][0].replace(T, TM),
    f"{WAKE}; SET @free = COALESCE(@locked = 1 AND EXISTS (SELECT 1 FROM {E}) AND "
    f"NOT EXISTS (SELECT 1 FROM {TM} WHERE name_key = 'k'), 0); INSERT INTO {TM} (token, name_key, fence, expires_at) "
    "SELECT '{next}', 'k', NEXTVAL(hp_seq), @now + 60 FROM DUAL WHERE @free RETURNING 1, RELEASE_LOCK('hp-name')",
)
#: the holder table of each variant that does not use ``T``
TABLE = {"mem-lease": TM, "mem-min": TM, "slot": S}
#: the release's second round trip, sent once its first answered (off the hand-off's path)
LATE = {
    "no-delete": f"DELETE FROM {T} WHERE token = '{{me}}'",
    "no-delete-check": f"DELETE FROM {T} WHERE token = '{{me}}'",
    "marker-late": f"DELETE FROM {T} WHERE token = '{{me}}'; DELETE FROM {M} WHERE token = '{{me}}'",
}
#: the release's clean-up, deferred until the waiter holds (a delay in a library): the row taken over is the
#: waiter's now (another token), and the DELETE finds nothing
AFTER = {"slot": f"DELETE FROM {S} WHERE name_key = 'k' AND token = '{{me}}'; DELETE FROM {M} WHERE token = '{{me}}'"}
#: the statement whose answer tells whether the bell wait's statement granted (its column), per variant
GRANT_COLUMN = {"direct": 1} | dict.fromkeys(
    ("lease", "lease-min", "marker", "marker-late", "takeover", "rel-lock", "slot", "mem-lease", "mem-min"), 0
)


def _connect(url: str) -> Any:
    sys.path.insert(0, str(ROOT / "src"))
    import distlock

    cfg = distlock._url.parse_url(url)
    host, port = cfg.hosts[0]
    return pymysql.connect(
        host=host, port=port, user=cfg.username, password=cfg.password, database=cfg.path.lstrip("/"),
        autocommit=True, client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS,
        init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",  # as distlock's sessions
    )  # fmt: skip


def _run(conn: Any, sql: str) -> Any:
    """Run a multi-statement; the first row of its last result (None if it has none)."""
    row = None
    with conn.cursor() as cur:
        cur.execute(sql)
        while True:
            if cur.description is not None:
                row = cur.fetchone()
            if not cur.nextset():
                return row


def measure(url: str, variant: str, seconds: float) -> tuple[float, int, int]:
    """The p50 (ms) of the hand-offs of ``variant`` over ``seconds``, its refusals and its hand-offs."""
    release, wait = VARIANTS[variant]
    conns = [_connect(url), _connect(url)]
    _run(conns[0], f"DELETE FROM {T}; DELETE FROM {M}; DELETE FROM {S}; DELETE FROM {TM}")
    tokens = [uuid.uuid4().hex, uuid.uuid4().hex]
    _run(conns[0], f"DO GET_LOCK('{BELL}', 1)")  # worker 0 holds first: its bell and its row
    table = TABLE.get(variant, T)
    _run(
        conns[0],
        f"INSERT INTO {table} (token, name_key, fence, expires_at) VALUES ('{tokens[0]}', 'k', NEXTVAL(hp_seq), {NOW} + 60)",
    )
    lat: list[float] = []
    refused = [0]
    holder = [0]
    sent = [0.0]
    done = threading.Event()
    cond = threading.Condition()
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        conn = conns[i]
        first = i == 0
        while True:
            if not first:
                row = _run(conn, wait.format(next=tokens[i]))
                lat.append(time.perf_counter() - sent[0])
                col = GRANT_COLUMN.get(variant)
                if col is not None and (row is None or row[col] in (None, 0)):
                    refused[0] += 1  # not granted by the bell wait's statement: counted, reported
                with cond:
                    holder[0] = i
                    cond.notify_all()
            time.sleep(0.05 if first else HOLD)  # first: the other's bell wait is sent meanwhile
            first = False
            if time.monotonic() > stop:
                done.set()
            me, nxt = tokens[i], tokens[1 - i]
            tokens[i] = uuid.uuid4().hex  # our next acquisition's, known before the other's release
            sent[0] = time.perf_counter()
            _run(conn, release.format(me=me, next=nxt))
            if variant in LATE:  # the release's second round trip, sent once its first answered: off the timed path
                _run(conn, LATE[variant].format(me=me))
            if done.is_set():
                return
            with cond:
                while holder[0] == i and not done.is_set():
                    cond.wait(0.1)
            if variant in AFTER:  # once the other holds: what a deferred clean-up would find
                _run(conn, AFTER[variant].format(me=me))
            if done.is_set():
                return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    for c in conns:
        c.close()
    return statistics.median(lat[1:]) * 1000 if len(lat) > 1 else float("nan"), refused[0], len(lat)


def check_slot(url: str) -> None:
    """``slot``'s take-over decided inside the duplicate key's row lock, on the server (no timing): a live row not
    marked is left, a marked or expired one taken over; a take-over of an expired row behind a renewal not yet
    committed waits for it and leaves the renewed row; one behind the release's clean-up not yet committed waits
    and inserts. Raises on the first case that does not hold."""
    a, b = _connect(url), _connect(url)
    take = (f"SET @locked = 1, @now = {NOW}; " + VARIANTS["slot"][1].split("; ", 2)[2].format(next="new")).replace(
        "SELECT ROW_COUNT(), RELEASE_LOCK('hp-name')", f"SELECT ROW_COUNT(), (SELECT token FROM {S})"
    )

    def case(what: str, expires: int, marked: bool, before: str | None, want: tuple[int, str]) -> None:
        _run(
            a,
            f"DELETE FROM {S}; DELETE FROM {M}; INSERT INTO {S} VALUES ('k', 'old', NEXTVAL(hp_seq), {NOW} + {expires})",
        )
        if marked:
            _run(a, f"INSERT INTO {M} VALUES ('old', 'k')")
        got: list[Any] = []
        if before is None:
            got.append(_run(b, take))
        else:  # another transaction holds the row: the take-over must wait for its COMMIT, then see its result
            _run(a, f"BEGIN; {before}")
            t = threading.Thread(target=lambda: got.append(_run(b, take)))
            t.start()
            time.sleep(0.5)
            if not t.is_alive() or got:
                raise AssertionError(f"{what}: the take-over did not wait for the row lock")
            _run(a, "COMMIT" + (f"; DELETE FROM {M} WHERE token = 'old'" if marked else ""))
            t.join(10)
        if tuple(got[0]) != want:
            raise AssertionError(f"{what}: (row count, token) {tuple(got[0])}, expected {want}")
        print(f"slot: {what}: {want[0]} ({'taken over' if want[0] == 2 else 'inserted' if want[0] == 1 else 'left'})")

    case("a live row, not marked", 60, False, None, (0, "old"))
    case("a live row, marked", 60, True, None, (2, "new"))
    case("an expired row", -1, False, None, (2, "new"))
    renew = f"UPDATE {S} SET expires_at = {NOW} + 60 WHERE name_key = 'k' AND token = 'old'"
    case("an expired row, a renewal in flight", -1, False, renew, (0, "old"))
    case(
        "a marked row, its clean-up in flight",
        60,
        True,
        f"DELETE FROM {S} WHERE name_key = 'k' AND token = 'old'",
        (1, "new"),
    )
    a.close()
    b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--mysql", help="a MariaDB URL to use instead of starting a server")
    ap.add_argument("--only", help="comma-separated variants (raw is always measured)")
    ap.add_argument("--check-slot", action="store_true", help="check slot's take-over on the server, then stop")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tools.servers.mysql import mariadb_server

    ctx = mariadb_server() if args.mysql is None else None
    url = args.mysql or str(ctx.__enter__().url)  # type: ignore[union-attr]
    try:
        c = _connect(url)
        _run(c, f"CREATE TABLE IF NOT EXISTS {T} (token VARCHAR(64) PRIMARY KEY, name_key VARCHAR(64) NOT NULL, "
                "fence BIGINT NOT NULL, expires_at DOUBLE NOT NULL, KEY (name_key)) ENGINE=InnoDB")  # fmt: skip
        _run(c, "CREATE SEQUENCE IF NOT EXISTS hp_seq")
        _run(c, f"CREATE TABLE IF NOT EXISTS {TM} (token VARCHAR(64) PRIMARY KEY, name_key VARCHAR(64) NOT NULL, "
                "fence BIGINT NOT NULL, expires_at DOUBLE NOT NULL, KEY (name_key)) ENGINE=MEMORY")  # fmt: skip
        _run(
            c,
            f"CREATE TABLE IF NOT EXISTS {E} (one TINYINT PRIMARY KEY) ENGINE=MEMORY; INSERT IGNORE INTO {E} VALUES (1)",
        )
        _run(c, f"CREATE TABLE IF NOT EXISTS {S} (name_key VARCHAR(64) PRIMARY KEY, token VARCHAR(64) NOT NULL, "
                "fence BIGINT NOT NULL, expires_at DOUBLE NOT NULL) ENGINE=InnoDB")  # fmt: skip
        _run(c, f"CREATE TABLE IF NOT EXISTS {M} (token VARCHAR(64) PRIMARY KEY, name_key VARCHAR(64) NOT NULL, "
                "KEY (name_key)) ENGINE=MEMORY")  # fmt: skip
        c.close()
        if args.check_slot:
            check_slot(url)
            return
        names = ["raw", *(v for v in (args.only.split(",") if args.only else VARIANTS) if v != "raw")]
        for v in names:
            measure(url, v, 0.5)  # warm
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            res = {v: measure(url, v, args.seconds) for v in order}
            raw = res["raw"][0]
            print(f"round {r}: " + " | ".join(
                f"{v} {p50:.3f} ms = {p50 / raw:.2f}x" + (f" (refused {no} of {n})" if no else "")
                for v in names for p50, no, n in [res[v]]), flush=True)  # fmt: skip
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


if __name__ == "__main__":
    main()
