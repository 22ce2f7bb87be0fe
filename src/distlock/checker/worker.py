"""One worker process of ``distlock check``: acquire, read-modify-write both resources, release, report.

Every operation is reported to the parent as one ``Op`` (a plain dict, so it pickles cheaply) after the
release. A worker killed with SIGKILL never reports its last operation; the analysis allows for that.
Times are ``time.monotonic()`` (CLOCK_MONOTONIC on Linux), one clock for every process on the host.

Each worker reports through a pipe of its own (``Events``), not a queue shared by all: a
``multiprocessing.Queue`` puts under one lock that every writer shares, and a worker killed with SIGKILL
while holding it would leave every other worker's reports stuck forever (and those workers unable to exit).

Two more events feed the *told late* figure, sent the moment they happen rather than after the release (a
worker whose link is dead may never get to release): ``grant`` when ``acquire()`` returned, and ``lost`` when
the lock's ``on_lost`` callback ran for that holding (each holding has its own lock object, so a callback
that runs late is never taken for the next holding's).

A worker the injector targets with a gray link fault *lingers* in its critical section (flag in shared
memory): it keeps working, as a long job that watches ``lost`` would, until ``lost`` fires or the injector
clears the flag. Then it writes and releases as usual.

With ``--api async`` the worker drives the asyncio API instead (``AsyncDistlockLock``): the same loop
and the same faults, through the async store and its own drivers (aiomysql, psycopg's ``AsyncConnection``,
redis-py's asyncio client...), whose renewals then run as tasks.

With ``--sink`` each holding also reads every data sink right after the grant and writes it at the end of its
critical section, once per writer (``writers.Writers``): the figures come from what the resources accepted.

The worker writes to the resources blindly, without first asking whether it still holds the lock: a process
that was paused between its check and its write would write anyway, and showing what the resources do then
is the point of the check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import LockError, NotHeld
from .adapters import AsyncDistlockLock, DistlockLock
from .broken import BROKEN, CheckedLock
from .history import FORKED_CHILD
from .primitives import PRIMITIVES, linger_watch, run_primitive
from .resource import FencedOutcome, FencedRegister, UnfencedSet
from .semaphore import SEMAPHORE, run_semaphore
from .sinks import SinkSpec
from .writers import Writers

#: algorithms that run distlock's own lock (``ignore-lost``: a user who never looks at ``lost``; ``election``:
#: the workers campaign in a leader election and the leader writes with its term as the fence)
DISTLOCK_ALGORITHMS = ("distlock", "ignore-lost", "election")

# per-worker state in the shared array the fault injector reads
IDLE, WAITING, HOLDING, HOLD_SLEEP, DONE, LINGER, FORKING = 0, 1, 2, 3, 4, 5, 6
#: what the injector asks of a holder through its ``linger`` flag: stay (gray link faults), or fork (``fork``)
STAY, FORK = 1, 2
#: how many children a holder forks for the ``fork`` fault
FORK_CHILDREN = 2
#: the worker number a forked child reports an operation under: its parent's plus this
CHILD_WORKER = 10_000


@dataclass(frozen=True)
class Spec:
    """Everything a worker needs; picklable."""

    url: str | None
    algorithm: str
    name: str
    ttl: float
    hold: float
    workdir: str
    api: str = "sync"  # or "async": distlock's lock through the asyncio API (AsyncDistlockLock)
    sinks: SinkSpec | None = None  # the data sinks each holding writes to (``--sink``), and their writers
    workers: int = 0  # how many workers run at once (a barrier's parties and a latch's count follow from it)
    permits: int = 0  # ``--algorithm semaphore``: the semaphore's capacity


#: an error report's text is cut to this many characters (see ``Events``)
ERROR_CHARS = 1000


class Events:
    """The worker's end of its report pipe. Sends are whole messages under a lock, because the ``on_lost``
    callback reports from its own thread; a pipe the parent has closed (the run is over) drops them.

    A report is kept well under PIPE_BUF (4096 bytes), so it goes into the pipe in one atomic write: a worker
    paused or killed mid-send never leaves half a message for the parent to wait on."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._lock = threading.Lock()

    def put(self, event: dict[str, Any]) -> None:
        if "error" in event:
            event = {**event, "error": str(event["error"])[:ERROR_CHARS]}
        with self._lock:
            try:
                self.conn.send(event)
            except (OSError, ValueError):  # the parent stopped listening
                pass


def make_lock(spec: Spec) -> CheckedLock:
    if spec.algorithm in DISTLOCK_ALGORITHMS:
        kind = AsyncDistlockLock if spec.api == "async" else DistlockLock
        return kind(
            spec.url,
            spec.name,
            spec.ttl,
            watch_lost=spec.algorithm != "ignore-lost",
            election=spec.algorithm == "election",
        )
    factory, _needs_redis = BROKEN[spec.algorithm]
    lock: CheckedLock = factory(spec.url or "", spec.name, spec.ttl, Path(spec.workdir))
    return lock


def _linger(index: int, lock: CheckedLock, states: Any, linger: Any) -> None:
    """Stay in the critical section while the injector says so, until ``lost`` fires."""
    if linger[index] != STAY:
        return
    states[index] = LINGER
    lost = lock.lost_event() if isinstance(lock, DistlockLock) else None
    while linger[index]:
        if lost is not None:
            if lost.wait(0.005):
                return
        else:
            time.sleep(0.005)


def _write_fenced(fenced: FencedRegister, fence: int | None, read: FencedOutcome | None) -> str:
    """The holder's fenced write after its read: how the register took it (the ``fenced`` field of an op)."""
    if fence is None or read is None:
        return "n/a"
    if not read.accepted:
        return "rejected"
    wrote = fenced.write(fence, read.value + 1)
    if not wrote.accepted:
        return "rejected"
    return "stale-accepted" if wrote.value != read.value else "accepted"


def _fork_children(index: int, spec: Spec, lock: DistlockLock, events: Events) -> None:
    """The ``fork`` fault: the holder forks children that use the store they inherit while it holds the lock
    (a pre-fork server's workers, a pool's), and waits for them to exit, a lease at most (then kills them).
    Its own operation then goes on and is judged as any other: a child that released, renewed or broke the
    parent's holding or its connections shows in the figures (another worker granted the lock while the
    parent writes, a stale write, a lost signal)."""
    pids = []
    for n in range(FORK_CHILDREN):
        with warnings.catch_warnings():  # Python >= 3.12 warns about fork() in a process with threads
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _in_child(index, spec, lock, Events(events.conn), n)
                code = 0
            except BaseException as err:  # noqa: BLE001 - reported through the pipe and the exit status
                Events(events.conn).put({"kind": "error", "worker": index, "error": f"{FORKED_CHILD}: {err!r}"})
            finally:
                os._exit(code)
        pids.append(pid)
    give_up = time.monotonic() + max(5.0, 2.0 * spec.ttl)
    for pid in pids:
        status = None
        while status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
            elif time.monotonic() > give_up:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = -signal.SIGKILL
            else:
                time.sleep(0.005)
        if status != 0:
            events.put({"kind": "error", "worker": index, "error": f"{FORKED_CHILD} exited with {status}"})


def _in_child(index: int, spec: Spec, lock: DistlockLock, events: Events, n: int) -> None:
    """What a forked child does with the store it inherited: leave the parent's holding as leaving its
    ``with`` block would (a no-op), take and release a lock of its own, and try the parent's lock once
    without waiting (it is held: a grant is a second holder, reported as an operation so the overlap and
    stale-write figures judge it). Through the asyncio API on an event loop of the child's own."""
    if isinstance(lock, AsyncDistlockLock):
        store, held = lock.store._target, lock.lock._target

        async def body() -> None:
            try:
                await (held.resign() if lock.election else held.release())
            except NotHeld:
                pass
            own = store.lock(f"{spec.name}/fork/{os.getpid()}", ttl=spec.ttl)
            if not await own.acquire(timeout=spec.ttl):
                raise LockError("could not take a lock of its own")
            await own.release()
            if not lock.election:
                same = store.lock(spec.name, ttl=spec.ttl)
                t_start = time.monotonic()
                if await same.acquire(blocking=False):
                    _child_op(index, spec, events, n, same.fence, t_start)
                    await same.release()
            await store.aclose()

        asyncio.run(body())
        return
    store, held = lock.store, lock.lock
    try:
        held.resign() if lock.election else held.release()
    except NotHeld:
        pass
    own = store.lock(f"{spec.name}/fork/{os.getpid()}", ttl=spec.ttl)
    if not own.acquire(timeout=spec.ttl):
        raise LockError("could not take a lock of its own")
    own.release()
    if not lock.election:
        same = store.lock(spec.name, ttl=spec.ttl)
        t_start = time.monotonic()
        if same.acquire(blocking=False):
            _child_op(index, spec, events, n, same.fence, t_start)
            same.release()
    store.close()


def _child_op(index: int, spec: Spec, events: Events, n: int, fence: int | None, t_start: float) -> None:
    """A forked child was granted the lock its parent holds: it writes as a holder would, and reports it."""
    t_acq = time.monotonic()
    workdir = Path(spec.workdir)
    unfenced, fenced = UnfencedSet(workdir / "unfenced.txt"), FencedRegister(workdir / "fenced.db")
    op_id = f"{index}.fork{os.getpid()}"
    unfenced.write([*unfenced.read(), op_id], tag=f"{index}-{n}")
    result = _write_fenced(fenced, fence, fenced.read(fence) if fence is not None else None)
    fenced.close()
    t_rel = time.monotonic()
    events.put(
        {"kind": "op", "worker": CHILD_WORKER + index, "op": op_id, "fence": fence, "t_start": t_start,
         "t_acq": t_acq, "t_rel": t_rel, "t_done": t_rel, "told": False, "fenced": result}
    )  # fmt: skip


def _run_primitive_worker(index: int, spec: Spec, events: Events, states: Any, go: Any, end: Any, linger: Any) -> None:
    """A barrier, latch (``primitives.py``) or semaphore (``semaphore.py``) worker: the same start, report and
    exit as a lock's."""
    from .._sync.store import connect

    try:
        store = connect(spec.url)
    except Exception as err:  # noqa: BLE001 - reported to the parent, which shows it in one line
        events.put({"kind": "error", "worker": index, "error": f"{type(err).__name__}: {err}"})
        states[index] = DONE
        events.put({"kind": "exit", "worker": index})
        return
    semaphore = spec.algorithm == SEMAPHORE  # its holders linger themselves, as a lock's do
    stop = (
        linger_watch(index, states, linger, HOLD_SLEEP, LINGER, STAY) if linger is not None and not semaphore else None
    )
    events.put({"kind": "ready", "worker": index})
    go.wait()
    try:
        if semaphore:
            run_semaphore(index, store, spec.name, spec.permits, spec.ttl, spec.hold, events, states, end, linger)
        else:
            run_primitive(spec.algorithm, index, store, spec.name, spec.ttl, spec.workers, events, states, end,
                          HOLD_SLEEP, IDLE)  # fmt: skip
    finally:
        states[index] = DONE
        if stop is not None:
            stop()
        events.put({"kind": "exit", "worker": index})
        with contextlib.suppress(LockError):
            store.close()


def run_worker(index: int, spec: Spec, conn: Any, states: Any, go: Any, end: Any, linger: Any = None) -> None:
    """The worker process entry point (``multiprocessing`` spawn target); ``conn`` is its report pipe."""
    events = Events(conn)
    # drivers warn on stderr when a paused worker wakes up to a dropped session: expected here, not news
    logging.basicConfig(level=logging.ERROR, format="distlock check worker: %(message)s")
    if spec.algorithm in (*PRIMITIVES, SEMAPHORE):
        _run_primitive_worker(index, spec, events, states, go, end, linger)
        return
    workdir = Path(spec.workdir)
    unfenced = UnfencedSet(workdir / "unfenced.txt")
    fenced = FencedRegister(workdir / "fenced.db")
    writers: Writers | None = None
    try:
        lock = make_lock(spec)
        writers = Writers(spec.sinks) if spec.sinks is not None else None
    except Exception as err:  # noqa: BLE001 - reported to the parent, which shows it in one line
        events.put({"kind": "error", "worker": index, "error": f"{type(err).__name__}: {err}"})
        states[index] = DONE
        events.put({"kind": "exit", "worker": index})
        return
    events.put({"kind": "ready", "worker": index})
    go.wait()
    seq = 0

    def report_lost(op_id: str, t: float) -> None:
        events.put({"kind": "lost", "worker": index, "op": op_id, "t": t})

    def report_risk(op_id: str, t: float) -> None:
        events.put({"kind": "at_risk", "worker": index, "op": op_id, "t": t})

    def to_sinks(kind: str, op_id: str, fence: int | None) -> dict[str, str]:
        if writers is None or not isinstance(lock, DistlockLock):
            return {}
        return writers.access(kind, index, op_id, fence, lock)

    try:
        while time.monotonic() < end.value:
            states[index] = WAITING
            op_id = f"{index}.{seq}"
            if isinstance(lock, DistlockLock):
                lock.prepare(op_id, report_lost, report_risk if writers is not None else None)
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
            seq += 1
            events.put({"kind": "grant", "worker": index, "op": op_id, "t_acq": t_acq})
            read = fenced.read(fence) if fence is not None else None
            items = unfenced.read()
            to_sinks("read", op_id, fence)
            states[index] = HOLD_SLEEP
            time.sleep(random.uniform(spec.hold / 2, spec.hold))
            if linger is not None and linger[index] == FORK and isinstance(lock, DistlockLock):
                states[index] = FORKING
                _fork_children(index, spec, lock, events)
                linger[index] = 0
            elif linger is not None:
                _linger(index, lock, states, linger)
            states[index] = HOLDING
            sunk = to_sinks("write", op_id, fence)
            unfenced.write([*items, op_id], tag=str(index))
            fenced_result = _write_fenced(fenced, fence, read)
            t_rel = time.monotonic()
            states[index] = IDLE
            try:
                clean = lock.release()
            except LockError as err:
                events.put({"kind": "error", "worker": index, "error": f"release: {err}"})
                clean = False
            t_done = time.monotonic()
            events.put(
                {
                    "kind": "op",
                    "worker": index,
                    "op": op_id,
                    "fence": fence,
                    "t_start": t_start,
                    "t_acq": t_acq,
                    "t_rel": t_rel,
                    "t_done": t_done,
                    "told": not clean,
                    "fenced": fenced_result,
                    **({"sinks": sunk} if sunk else {}),
                }
            )
    finally:
        states[index] = DONE
        fenced.close()
        # reported before closing the store: the history is complete here, and a store that is slow to close
        # must not hold up the verdict (the parent waits a bounded time for the process, then kills it)
        events.put({"kind": "exit", "worker": index})
        try:
            if writers is not None:
                with contextlib.suppress(Exception):  # a sink that fails to close must not keep the store open
                    writers.close(lock)
            lock.close()
        except LockError:
            pass
