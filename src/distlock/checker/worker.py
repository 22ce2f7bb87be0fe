"""One worker process of ``distlock check``: acquire, read-modify-write both resources, release, report.

Every operation is reported to the parent as one :class:`Op` (a plain dict, so it pickles cheaply) after the
release. A worker killed with SIGKILL never reports its last operation; the analysis allows for that.
Times are ``time.monotonic()`` (CLOCK_MONOTONIC on Linux), one clock for every process on the host.

The worker writes to the resources blindly, without first asking whether it still holds the lock: a process
that was paused between its check and its write would write anyway, and showing what the resources do then
is the point of the check.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import LockError, NotHeld
from .broken import BROKEN, CheckedLock
from .resource import FencedRegister, UnfencedSet

# per-worker state in the shared array the fault injector reads
IDLE, WAITING, HOLDING, HOLD_SLEEP, DONE = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Spec:
    """Everything a worker needs; picklable."""

    url: str | None
    algorithm: str
    name: str
    ttl: float
    hold: float
    workdir: str


class DistlockLock:
    """The library's own lock, as the checker drives it."""

    def __init__(self, url: str | None, name: str, ttl: float) -> None:
        from .._sync.store import connect

        self.store = connect(url)
        self.lock = self.store.lock(name, ttl=ttl)
        self.fence: int | None = None

    def acquire(self, timeout: float) -> bool:
        ok = self.lock.acquire(timeout=max(0.0, timeout))
        self.fence = self.lock.fence if ok else None
        return ok

    def release(self) -> bool:
        told = self.lock.lost.is_set()
        try:
            self.lock.release()
        except NotHeld:  # LockLost included: the holder is told it lost the lock
            return False
        return not told

    def close(self) -> None:
        self.store.close()


def make_lock(spec: Spec) -> CheckedLock:
    if spec.algorithm == "distlock":
        return DistlockLock(spec.url, spec.name, spec.ttl)
    factory, _needs_redis = BROKEN[spec.algorithm]
    lock: CheckedLock = factory(spec.url or "", spec.name, spec.ttl, Path(spec.workdir))
    return lock


def run_worker(index: int, spec: Spec, events: Any, states: Any, go: Any, end: Any) -> None:
    """The worker process entry point (``multiprocessing`` spawn target)."""
    # drivers warn on stderr when a paused worker wakes up to a dropped session: expected here, not news
    logging.basicConfig(level=logging.ERROR, format="distlock check worker: %(message)s")
    workdir = Path(spec.workdir)
    unfenced = UnfencedSet(workdir / "unfenced.txt")
    fenced = FencedRegister(workdir / "fenced.db")
    try:
        lock = make_lock(spec)
    except Exception as err:  # noqa: BLE001 - reported to the parent, which shows it in one line
        events.put({"kind": "error", "worker": index, "error": f"{type(err).__name__}: {err}"})
        states[index] = DONE
        events.put({"kind": "exit", "worker": index})
        return
    events.put({"kind": "ready", "worker": index})
    go.wait()
    seq = 0
    try:
        while time.monotonic() < end.value:
            states[index] = WAITING
            t_start = time.monotonic()
            try:
                got = lock.acquire(timeout=end.value - t_start)
            except LockError as err:
                events.put({"kind": "error", "worker": index, "error": f"acquire: {err}"})
                time.sleep(0.05)
                continue
            if not got:
                break
            t_acq = time.monotonic()
            states[index] = HOLDING
            fence = lock.fence
            op_id = f"{index}.{seq}"
            seq += 1
            read = fenced.read(fence) if fence is not None else None
            items = unfenced.read()
            states[index] = HOLD_SLEEP
            time.sleep(random.uniform(spec.hold / 2, spec.hold))
            states[index] = HOLDING
            unfenced.write([*items, op_id], tag=str(index))
            if fence is None or read is None:
                fenced_result = "n/a"
            elif not read.accepted:
                fenced_result = "rejected"
            else:
                wrote = fenced.write(fence, read.value + 1)
                if not wrote.accepted:
                    fenced_result = "rejected"
                elif wrote.value != read.value:
                    fenced_result = "stale-accepted"
                else:
                    fenced_result = "accepted"
            t_rel = time.monotonic()
            states[index] = IDLE
            try:
                clean = lock.release()
            except LockError as err:
                events.put({"kind": "error", "worker": index, "error": f"release: {err}"})
                clean = False
            events.put(
                {
                    "kind": "op",
                    "worker": index,
                    "op": op_id,
                    "fence": fence,
                    "t_start": t_start,
                    "t_acq": t_acq,
                    "t_rel": t_rel,
                    "told": not clean,
                    "fenced": fenced_result,
                }
            )
    finally:
        states[index] = DONE
        fenced.close()
        # reported before closing the store: the history is complete here, and a store that is slow to close
        # must not hold up the verdict (the parent waits a bounded time for the process, then kills it)
        events.put({"kind": "exit", "worker": index})
        try:
            lock.close()
        except LockError:
            pass
