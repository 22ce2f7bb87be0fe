"""``hold_count``: how many times the calling owner holds a lock, kept locally (no I/O), per thread or task."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import distlock


def test_hold_count_per_kind_and_per_thread(tmp_path: Path) -> None:
    with distlock.connect(f"sqlite:///{tmp_path}/l.db") as store:
        r, m, sem, rw = store.rlock("r"), store.lock("m"), store.semaphore("s", permits=3), store.rwlock("rw")
        assert (r.hold_count, m.hold_count, sem.hold_count, rw.read.hold_count) == (0, 0, 0, 0)
        with r, r, r:
            assert r.hold_count == 3
            seen: list[int] = []
            t = threading.Thread(target=lambda: seen.append(r.hold_count))
            t.start()
            t.join()
            assert seen == [0]  # another owner holds nothing of it
            r.release()
            assert r.hold_count == 2
            r.acquire()
        assert r.hold_count == 0
        with m:
            assert m.hold_count == 1
        with sem, sem:
            assert sem.hold_count == 2
        assert sem.hold_count == 0
        with rw.read:
            assert (rw.read.hold_count, rw.write.hold_count) == (1, 0)


def test_hold_count_per_task(tmp_path: Path) -> None:
    async def main() -> None:
        async with distlock.connect_async(f"sqlite:///{tmp_path}/l.db") as store:
            r = store.rlock("r")
            async with r, r:
                assert r.hold_count == 2
                assert await asyncio.create_task(_count(r)) == 0  # another task is another owner
            assert r.hold_count == 0

    async def _count(lock: distlock.AsyncLock) -> int:
        return lock.hold_count

    asyncio.run(main())
