"""How a protected resource rejects a stale holder with the fencing token.

The resource here is a SQLite table; the pattern is the same for any store that can do a conditional write:
write only if the fence you carry is at least the largest the resource has seen (``fence <= :fence``: a
holder's own second write carries the same fence and must pass; an older holder's fence is smaller and fails).

    python examples/fencing.py            # uses a temporary SQLite lock store

A holder that was paused past its lease (GC, SIGSTOP, VM freeze) wakes up believing it still holds the
lock; its write carries an older fence than the new holder's and is rejected.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import distlock


def guarded_write(db: sqlite3.Connection, value: str, fence: int) -> bool:
    """Write ``value`` only if ``fence`` is at least every fence the resource has accepted (>=, not >: the
    holder's own second write carries the same fence)."""
    cur = db.execute("UPDATE resource SET value = ?, fence = ? WHERE id = 1 AND fence <= ?", (value, fence, fence))
    db.commit()
    return cur.rowcount == 1


def main(url: str | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="distlock-fencing-") as tmp:  # removed at the end, with its files
        return run(Path(tmp), url)


def run(workdir: Path, url: str | None) -> int:
    url = url or f"sqlite:///{workdir}/locks.db"
    db = sqlite3.connect(workdir / "resource.db")
    try:
        db.execute("CREATE TABLE resource (id INTEGER PRIMARY KEY, value TEXT, fence INTEGER NOT NULL)")
        db.execute("INSERT INTO resource VALUES (1, 'initial', 0)")
        db.commit()
        return demonstrate(db, url)
    finally:
        db.close()


def demonstrate(db: sqlite3.Connection, url: str) -> int:
    with distlock.connect(url) as store:
        slow = store.lock("report", ttl=0.5, auto_renew=False)  # a holder that will stall past its lease
        slow.acquire()
        stale_fence = slow.fence
        assert stale_fence is not None
        time.sleep(0.7)  # ... paused: the lease runs out

        fast = store.lock("report", ttl=10)
        fast.acquire()  # a new holder, with a larger fence
        assert fast.fence is not None
        print(f"new holder writes with fence {fast.fence}: accepted={guarded_write(db, 'fresh', fast.fence)}")
        fast.release()

        # the stalled holder wakes up and writes: rejected, because the resource has seen a larger fence
        accepted = guarded_write(db, "stale", stale_fence)
        print(f"stale holder writes with fence {stale_fence}: accepted={accepted}")
        try:
            slow.release()
        except distlock.LockLost:
            print("stale holder's release(): LockLost (it had lost the lock)")
    value = db.execute("SELECT value FROM resource").fetchone()[0]
    print(f"resource value: {value!r}")
    return 0 if (not accepted and value == "fresh") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
