"""Fenced writes with ``distlock.fencing``: a stale holder is refused by every kind of store its data lives in.

    python examples/fenced_sinks.py                          # a SQLite table and a local file
    python examples/fenced_sinks.py redis://127.0.0.1:6379   # and a Redis key

A holder stalls past its lease (GC, SIGSTOP, a VM freeze) and wakes up believing it still holds the lock.
Meanwhile a new holder, with a larger fence, has written. Each store then refuses the stale holder's write
(``StaleFence``) and keeps the new holder's data: no hand-written compare anywhere.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import distlock
from distlock import fencing


def write_all(workdir: Path, db: sqlite3.Connection, redis_client: object | None, value: str, fence: int) -> list[str]:
    """Write ``value`` to every store under ``fence``; the names of the stores that refused it."""
    refused: list[str] = []
    try:
        fencing.check(db, "report", fence)  # in the write's own transaction
        db.execute("UPDATE report SET value = ? WHERE id = 1", (value,))
        db.commit()
    except distlock.StaleFence:
        db.rollback()
        refused.append("sql")
    try:
        fencing.replace_file(workdir / "report.txt", value, fence)
    except distlock.StaleFence:
        refused.append("file")
    if redis_client is not None:
        try:
            fencing.redis_set(redis_client, "example:report", value, fence)
        except distlock.StaleFence:
            refused.append("redis")
    return refused


def main(redis_url: str | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="distlock-sinks-") as tmp:
        workdir = Path(tmp)
        with contextlib.closing(sqlite3.connect(workdir / "data.db")) as db:
            db.execute("CREATE TABLE report (id INTEGER PRIMARY KEY, value TEXT)")
            db.execute("INSERT INTO report VALUES (1, 'initial')")
            db.commit()
            fencing.create_table(db)
            redis_client = None
            if redis_url:
                import redis

                redis_client = redis.Redis.from_url(redis_url)
            try:
                return demonstrate(workdir, db, redis_client)
            finally:
                if redis_client is not None:
                    redis_client.close()


def demonstrate(workdir: Path, db: sqlite3.Connection, redis_client: object | None) -> int:
    with distlock.connect(f"sqlite:///{workdir}/locks.db") as store:
        slow = store.lock("report", ttl=0.5, auto_renew=False)
        assert slow.acquire()
        stale = slow.fence
        assert stale is not None  # (acquire() leaves it typed int | None; `with ... as held` gives an int)
        time.sleep(0.7)  # paused past its lease
        with store.lock("report", ttl=10) as fresh:
            refused = write_all(workdir, db, redis_client, "fresh", fresh.fence)
            print(f"new holder (fence {fresh.fence}) refused by: {refused or 'none'}")
        refused_stale = write_all(workdir, db, redis_client, "stale", stale)
        print(f"stale holder (fence {stale}) refused by: {refused_stale}")
        with contextlib.suppress(distlock.LockLost):
            slow.release()
    value = db.execute("SELECT value FROM report").fetchone()[0]
    on_disk = (workdir / "report.txt").read_text()
    print(f"sql: {value!r}, file: {on_disk!r}")
    expected = ["sql", "file"] + (["redis"] if redis_client is not None else [])
    return 0 if refused_stale == expected and value == on_disk == "fresh" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
