"""The shared resources of the check. Nothing protects them but the lock under test.

* ``UnfencedSet`` -- a file listing operation ids. Each critical section reads the whole list, sleeps, and
  writes it back with its own id appended (a read-modify-write). When two holders overlap, one of them writes
  back a list without the other's id: a *lost update*, found after the run as an id that was reported written
  but is missing. Writes go through a temporary file and ``os.replace`` so a kill -9 never leaves half a file.
* ``FencedRegister`` -- an SQLite file with one row ``(max_fence, value)``. Every access carries the
  holder's fence and runs in its own ``BEGIN IMMEDIATE`` transaction: a fence lower than ``max_fence`` is
  rejected, any other raises ``max_fence`` to it (reads too, as Kleppmann's fenced storage does, so a newer
  holder's *read* already shuts out an older holder's write). An accepted write whose value changed since the
  same holder's read is an *accepted stale write*: the fence failed to keep two holders apart. With a lock whose
  fences strictly increase this cannot happen, whatever the pauses -- that is what fencing buys.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path


class UnfencedSet:
    def __init__(self, path: Path) -> None:
        self.path = path

    def create(self) -> None:
        self.path.write_text("")

    def read(self) -> list[str]:
        return self.path.read_text().split()

    def write(self, items: list[str], tag: str) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{tag}.tmp")
        tmp.write_text("\n".join(items) + "\n")
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class FencedOutcome:
    accepted: bool
    value: int  # the value read (for reads) or the value found when writing
    max_fence: int


class FencedRegister:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def create(self) -> None:
        with sqlite3.connect(self.path, isolation_level=None) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE reg (id INTEGER PRIMARY KEY CHECK (id = 1), max_fence INTEGER, value INTEGER)")
            conn.execute("INSERT INTO reg VALUES (1, -1, 0)")
        conn.close()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, isolation_level=None, timeout=60.0)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _access(self, fence: int, new_value: int | None) -> FencedOutcome:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            max_fence, value = db.execute("SELECT max_fence, value FROM reg WHERE id = 1").fetchone()
            if fence < max_fence:
                return FencedOutcome(False, value, max_fence)
            if new_value is None:
                db.execute("UPDATE reg SET max_fence = ? WHERE id = 1", (fence,))
            else:
                db.execute("UPDATE reg SET max_fence = ?, value = ? WHERE id = 1", (fence, new_value))
            return FencedOutcome(True, value, fence)
        finally:
            db.execute("COMMIT")

    def read(self, fence: int) -> FencedOutcome:
        """A fenced read: rejected if ``fence`` is stale, else raises the high-water mark to it."""
        return self._access(fence, None)

    def write(self, fence: int, value: int) -> FencedOutcome:
        """A fenced write; ``outcome.value`` is what was there before (compare with what this holder read)."""
        return self._access(fence, value)

    def final(self) -> tuple[int, int]:
        with sqlite3.connect(self.path, isolation_level=None, timeout=60.0) as conn:
            max_fence, value = conn.execute("SELECT max_fence, value FROM reg WHERE id = 1").fetchone()
        conn.close()
        return int(max_fence), int(value)
