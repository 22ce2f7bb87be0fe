#!/usr/bin/env python3
"""Where a MariaDB lease-mode hand-off goes: the bell hand-off rebuilt from bare statements, one part at a time.

    .venv/bin/python benchmarks/sql_handoff_parts.py [--rounds 4] [--seconds 3] [--mysql URL]

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
}


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


def measure(url: str, variant: str, seconds: float) -> float:
    """The p50 (ms) of the hand-offs of ``variant`` over ``seconds``."""
    release, wait = VARIANTS[variant]
    conns = [_connect(url), _connect(url)]
    _run(conns[0], f"DELETE FROM {T}")
    tokens = [uuid.uuid4().hex, uuid.uuid4().hex]
    _run(conns[0], f"DO GET_LOCK('{BELL}', 1)")  # worker 0 holds first: its bell and its row
    _run(conns[0], f"INSERT INTO {T} VALUES ('{tokens[0]}', 'k', NEXTVAL(hp_seq), {NOW} + 60)")
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
                if variant in ("lease", "direct") and (
                    row is None or row[1 if variant == "direct" else 0] in (None, 0)
                ):
                    refused[0] += 1  # not granted (the scheme's grant missed): counted, reported
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
            if variant == "no-delete":
                _run(conn, f"DELETE FROM {T} WHERE token = '{me}'")  # off the timed path
            if done.is_set():
                return
            with cond:
                while holder[0] == i and not done.is_set():
                    cond.wait(0.1)
            if done.is_set():
                return

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in (1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    for c in conns:
        c.close()
    if refused[0]:
        raise AssertionError(f"{variant}: {refused[0]} of {len(lat)} bell waits were not granted")
    return statistics.median(lat[1:]) * 1000 if len(lat) > 1 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--mysql", help="a MariaDB URL to use instead of starting a server")
    ap.add_argument("--only", help="comma-separated variants (raw is always measured)")
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
        c.close()
        names = ["raw", *(v for v in (args.only.split(",") if args.only else VARIANTS) if v != "raw")]
        for v in names:
            measure(url, v, 0.5)  # warm
        for r in range(args.rounds):
            order = names if r % 2 == 0 else names[::-1]
            res = {v: measure(url, v, args.seconds) for v in order}
            raw = res["raw"]
            print(f"round {r}: " + " | ".join(f"{v} {res[v]:.3f} ms = {res[v] / raw:.2f}x" for v in names), flush=True)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)


if __name__ == "__main__":
    main()
