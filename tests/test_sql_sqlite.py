"""SQLite: nothing of a released name stays in the file; fences from one counter go up for a reused name
across releases, ``break_lock`` and reopening; 0.1.0 per-name fences are taken over and their clients
refused; the counter's durable reservation (``synchronous=FULL`` once per block, see docs/sqlite.md)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path

import pytest

import distlock
from distlock._backends.sqlite import queries as sql


def rows(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(str(path))
    try:
        return {
            t: conn.execute(f"SELECT COUNT(*) FROM distlock_{t}").fetchone()[0] for t in ("holders", "queue", "fences")
        }
    finally:
        conn.close()


def counter(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(str(path))
    try:
        fence, reserved = conn.execute("SELECT fence, reserved FROM distlock_counter").fetchone()
        return int(fence), int(reserved)
    finally:
        conn.close()


def test_churn_over_fresh_names_leaves_no_row(tmp_path: Path) -> None:
    path = tmp_path / "locks.db"
    with distlock.connect(f"sqlite:///{path}") as a, distlock.connect(f"sqlite:///{path}") as b:
        for i in range(200):
            with a.lock(f"order-{i}", ttl=5):
                assert not b.lock(f"order-{i}", ttl=5).acquire(blocking=False)
        done: list[bool] = []

        def fair_waiter() -> None:
            done.append(b.lock("queued", ttl=5, fair=True).acquire(timeout=5))

        with a.lock("queued", ttl=5, fair=True):
            t = threading.Thread(target=fair_waiter)
            t.start()
            t.join(0.3)
        t.join(10)
        assert done == [True]
    assert rows(path) == {"holders": 0, "queue": 0, "fences": 0}


def test_fences_of_a_reused_name_go_up_after_release_break_and_reopen(tmp_path: Path, name: str) -> None:
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    fences: list[int | None] = []
    with distlock.connect(url) as a:
        for _ in range(3):
            with a.lock(name, ttl=5) as lock:
                fences.append(lock.fence)
        lock = a.lock(name, ttl=30)
        assert lock.acquire(timeout=5)
        fences.append(lock.fence)
        assert a.break_lock(name)
        with a.lock(name, ttl=5) as lock:
            fences.append(lock.fence)
    with distlock.connect(url) as b:  # a restart
        with b.lock(name, ttl=5) as lock:
            fences.append(lock.fence)
    assert all(f is not None for f in fences)
    assert fences == sorted(fences) and len(set(fences)) == len(fences), fences
    assert fences[-1] > sql.FENCE_BLOCK  # reopening moved past the durable reservation


def test_reservation_is_ahead_of_every_fence(tmp_path: Path) -> None:
    path = tmp_path / "locks.db"
    with distlock.connect(f"sqlite:///{path}") as s:
        top = 0
        for i in range(sql.FENCE_BLOCK + 5):  # crosses a block: that grant commits with synchronous=FULL
            with s.lock(f"n{i % 7}", ttl=5) as lock:
                assert lock.fence is not None and lock.fence > top
                top = lock.fence
                fence, reserved = counter(path)
                assert fence == top <= reserved


def test_upgrade_from_0_1_0_takes_over_per_name_fences_and_refuses_old_clients(tmp_path: Path, name: str) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("CREATE TABLE distlock_fences (name TEXT PRIMARY KEY, fence INTEGER NOT NULL)")
    conn.execute("INSERT INTO distlock_fences VALUES (?, 500), ('other', 7)", (name,))
    with distlock.connect(f"sqlite:///{path}") as s:
        with s.lock(name, ttl=5) as lock:
            assert lock.fence is not None and lock.fence > 500
        with s.lock("fresh", ttl=5) as lock:
            assert lock.fence is not None and lock.fence > 500
    assert rows(path)["fences"] == 0
    with pytest.raises(sqlite3.IntegrityError, match="cannot lock here"):  # what an old client runs
        conn.execute(
            "INSERT INTO distlock_fences(name, fence) VALUES (?, 1) "
            "ON CONFLICT(name) DO UPDATE SET fence = fence + 1 RETURNING fence",
            (name,),
        ).fetchone()
    conn.close()


def test_a_store_opening_a_new_file_another_connection_writes_waits_for_it(tmp_path: Path) -> None:
    """A deployment's first start: several stores open the same new file at once, and one is still creating
    the tables when the next switches the file to WAL. That switch needs the file to itself, and SQLite
    refuses it at once (no busy wait) while another connection writes: the opening store failed with
    "database is locked". Now it waits as for any write, within the busy timeout."""
    path = tmp_path / "first.db"
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # a rollback-journal file (not WAL yet), with a write in progress
    outcome: list[object] = []

    def open_and_lock() -> None:
        try:
            with distlock.connect(f"sqlite:///{path}") as store:
                lock = store.lock("first")
                outcome.append(lock.acquire(timeout=10))
                lock.release()
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome.append(exc)

    opener = threading.Thread(target=open_and_lock)
    opener.start()
    opener.join(0.3)
    assert not outcome, f"the store did not wait for the other writer: {outcome}"
    other.execute("COMMIT")
    opener.join(10)
    other.close()
    assert outcome == [True]
    with contextlib.closing(sqlite3.connect(str(path))) as check:  # closed: Python 3.13 warns of one left open
        assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
