"""The library's own lock as ``distlock check`` drives it: ``DistlockLock`` (the sync API) and
``AsyncDistlockLock`` (``--api async``: the same calls, run on an event loop of the worker's own). Each
holding gets its own lock object, so an ``on_lost`` callback that runs late is never taken for the next
holding's (the *told late* figure, ``worker.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

from .._errors import NotHeld

#: how a holder reports that its ``on_lost`` ran: (operation id, monotonic time)
LostReport = Callable[[str, float], None]


class DistlockLock:
    """The library's own lock, as the checker drives it.

    One lock object per holding (``prepare``), so the ``on_lost`` callback knows which operation it is
    about. With ``watch_lost=False`` (the ``ignore-lost`` baseline) no callback is registered and the
    lingering holder does not look at ``lost``: it learns of a loss only when ``release()`` says so.

    With ``election=True`` the "lock" is a candidacy in the leader election of the name: acquire is
    ``campaign()`` (the operation id as the value), the fence is the leader's ``term``, release is
    ``resign()``; everything else, and every fault, is the same."""

    #: which API the lock is driven through (``AsyncDistlockLock``: "async")
    api = "sync"

    def __init__(self, url: str | None, name: str, ttl: float, watch_lost: bool = True, election: bool = False) -> None:
        self.store: Any = self._open(url)
        self.name = name
        self.ttl = ttl
        self.watch_lost = watch_lost
        self.election = election
        self.lock: Any = self._make(None)
        self.fence: int | None = None
        self._prepared = ""
        self._op = ""

    def _open(self, url: str | None) -> Any:
        from .._sync.store import connect

        return connect(url)

    def _make(self, on_lost: Callable[[object], None] | None) -> Any:
        if self.election:
            return self.store.election(self.name, ttl=self.ttl, on_lost=on_lost)
        return self.store.lock(self.name, ttl=self.ttl, on_lost=on_lost)

    def prepare(self, op_id: str, report: LostReport, risk: LostReport | None = None) -> None:
        """The next acquire is operation ``op_id``; ``report(op_id, t)`` when its ``lost`` fires, and
        ``risk(op_id, t)`` each time it becomes at risk (``on_at_risk``)."""
        if op_id == self._prepared:
            return
        self._prepared = op_id

        def fired(_lock: object) -> None:
            report(op_id, time.monotonic())

        self._op = op_id
        self.lock = self._make(fired if self.watch_lost else None)
        if risk is not None:
            self.lock.on_at_risk(lambda _lock: risk(op_id, time.monotonic()))

    def scoped(self, fn: Callable[[], bool]) -> bool:
        """``fn()`` (an access to a data sink) if the local lease has time left: ``lock.check()`` right before
        it, as sync code should before each side effect. False, without running it, when the lease is over."""
        try:
            self.lock.check()
        except NotHeld:  # LockLost included
            return False
        return fn()

    def lost_event(self) -> Any:
        return self.lock.lost if self.watch_lost else None

    def acquire(self, timeout: float) -> bool:
        if self.election:
            ok = bool(self.lock.campaign(self._op or "candidate", timeout=max(0.0, timeout)))
            self.fence = self.lock.term if ok else None
            return ok
        ok = bool(self.lock.acquire(timeout=max(0.0, timeout)))
        self.fence = self.lock.fence if ok else None
        return ok

    def release(self) -> bool:
        told = self.lock.lost.is_set()
        try:
            if self.election:
                self.lock.resign()
            else:
                self.lock.release()
        except NotHeld:  # LockLost included: the holder is told it lost the lock
            return False
        return not told

    def close(self) -> None:
        self.store.close()


class AsyncDistlockLock(DistlockLock):
    """``DistlockLock`` through the asyncio API (``--api async``).

    An event loop runs in a daemon thread of the worker, with one task that makes every call the worker asks
    for, in order: a holding belongs to the task that acquired it (reentrancy and ``lost`` go by task), so
    acquire, release and the look at ``lost`` must come from the same task. The async store and locks are
    seen through ``_OnLoop``, so the driving code above serves both APIs. The store's renewals and
    ``on_lost`` callbacks run on that loop while the worker's own thread sleeps in its critical section. A
    paused or killed worker stops its loop with it, as the threads of a sync worker."""

    api = "async"

    def __init__(self, url: str | None, name: str, ttl: float, watch_lost: bool = True, election: bool = False) -> None:
        self._loop = asyncio.new_event_loop()
        self._jobs: asyncio.Queue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] | None = None
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), name="checker-asyncio", daemon=True)
        self._thread.start()
        started.wait()
        self._lost_flag = threading.Event()
        super().__init__(url, name, ttl, watch_lost, election)

    def _serve(self, started: threading.Event) -> None:
        async def serve() -> None:
            self._jobs = asyncio.Queue()
            started.set()
            while (job := await self._jobs.get()) is not None:
                fn, fut = job
                try:
                    result = fn()
                    if asyncio.iscoroutine(result):
                        result = await result
                except BaseException as exc:  # noqa: BLE001 - handed to the worker's thread
                    fut.set_exception(exc)
                else:
                    fut.set_result(result)

        self._loop.run_until_complete(serve())

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` (awaited if it returns a coroutine) in the loop's one task, the one that holds the lock (the
        data sinks' accesses go there: ``lease_timeout()`` belongs to the holding task); its result here."""
        return self._call(fn)

    def _call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` (awaited if it returns a coroutine) in the loop's one task; its result or exception here."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        assert self._jobs is not None
        self._loop.call_soon_threadsafe(self._jobs.put_nowait, (fn, fut))
        return fut.result()

    def _open(self, url: str | None) -> Any:
        from .._async.store import connect_async

        return _OnLoop(self._call(lambda: connect_async(url)), self._call)

    def _make(self, on_lost: Callable[[object], None] | None) -> Any:
        flag = self._lost_flag = threading.Event()

        def fired(lock: object) -> None:
            flag.set()
            if on_lost is not None:
                on_lost(lock)

        return super()._make(fired if on_lost is not None else None)

    def lost_event(self) -> Any:
        return self._lost_flag if self.watch_lost else None  # the async lock's own event is the loop's

    def close(self) -> None:
        try:
            self.store.aclose()
        finally:
            if self._jobs is not None:
                self._loop.call_soon_threadsafe(self._jobs.put_nowait, None)
            self._thread.join(10.0)


class _OnLoop:
    """An object of the async API seen from the worker's thread: every attribute read and every call is made
    by the loop's one task (a coroutine a call returns is awaited there), and an object it returns that
    belongs to the API (a lock, an election) is seen the same way."""

    def __init__(self, target: Any, call: Callable[[Callable[[], Any]], Any]) -> None:
        self._target = target
        self._call = call

    def __getattr__(self, attr: str) -> Any:
        value = self._call(lambda: getattr(self._target, attr))
        if not callable(value):
            return value
        call = self._call

        def method(*args: Any, **kwargs: Any) -> Any:
            result = call(lambda: value(*args, **kwargs))
            return _OnLoop(result, call) if type(result).__module__.startswith("distlock._async") else result

        return method
