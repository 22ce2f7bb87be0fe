"""Cancellation injected at every backend await point of acquire and release, on every backend.

A proxy sits between the store and its backend and numbers every backend call one lock operation makes
(``attempt.try_acquire``, ``attempt.wait``, ``backend.release``). A dry run counts them; then the same
scenario is re-run once per call and per way of cutting it, and the task is cancelled with a real
``task.cancel()``:

* ``before``: the task is parked in the proxy just before the call is issued, and cancelled there;
* ``after``: the call completed on the server, the task is cancelled before the caller sees the reply
  (the reply is lost to the cancellation, F10 in docs/safety.md);
* ``during``: the task is cancelled at the j-th suspension *inside* the driver's call (request written,
  reply not read yet, a connection taken from the pool, a worker thread running...), for every j the
  call reaches.

After each run the victim's client state and the server (``inspect``, then a fresh acquire by another
lock object on another store) must agree: no entry, queue node or waiter left behind, no phantom holding
(the client believing it holds what the server does not, or the reverse), and the cancellation is never
swallowed. The release cases run in a shielded task, so there the cancellation must wait for the release
to finish and the lock must end up free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import pytest

import distlock
from distlock._core.timing import monotonic
from distlock._core.types import Mode

#: the j-th suspension inside a call is tried for j < this (a call that finishes earlier is done sooner)
MAX_SUSPENSIONS = 8
#: a victim inside one wait() this long is taken as blocked, and the holder then releases (not an assertion)
BLOCKED_AFTER = 0.05


class _CancelAtSuspension:
    """Await ``coro`` as the current task would, but cancel ``victim`` when ``coro`` suspends the j-th time.

    When the current task is the victim, ``victim.cancel()`` while it runs makes the task cancel the very
    future the coroutine is about to park on: the CancelledError arrives exactly at that await point, as
    from any ``task.cancel()`` that happens while the task waits there. When the call runs in a shielded
    helper task (release), the victim is cancelled where it waits for the helper, and the call goes on.
    """

    def __init__(self, coro: Any, at: int, victim: asyncio.Task[Any], hit: Callable[[], None]) -> None:
        self._coro = coro
        self._at = at
        self._victim = victim
        self._hit = hit

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        suspensions = 0
        send: Any = None
        throw: BaseException | None = None
        while True:
            try:
                yielded = coro.throw(throw) if throw is not None else coro.send(send)
            except StopIteration as stop:
                return stop.value
            send, throw = None, None
            if suspensions == self._at:
                self._hit()
                self._victim.cancel()
            suspensions += 1
            try:
                send = yield yielded
            except BaseException as exc:  # noqa: BLE001 - handed on to the coroutine, as a task would
                throw = exc


@dataclass
class _Plan:
    victim: asyncio.Task[Any] | None = None
    at: int | None = None  # number of the backend call to cut
    how: str = ""  # "before", "after" or "during"
    suspension: int = 0  # for "during"
    hit: bool = False  # the cut happened
    calls: list[str] = field(default_factory=list)
    waiting_since: float | None = None


class _Attempt:
    def __init__(self, proxy: _Backend, inner: Any) -> None:
        self._proxy = proxy
        self._inner = inner

    async def try_acquire(self) -> Any:
        return await self._proxy._point("try_acquire", self._inner.try_acquire)

    async def wait(self, grant: Any, timeout: float | None) -> None:
        plan = self._proxy.plan
        plan.waiting_since = monotonic()
        try:
            await self._proxy._point("wait", lambda: self._inner.wait(grant, timeout))
        finally:
            plan.waiting_since = None

    async def abandon(self) -> None:  # clean-up after the cut: not a point of its own
        await self._inner.abandon()


class _Backend:
    """Delegates everything to the real backend; numbers the calls of one lock operation."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.plan = _Plan()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)

    def attempt(self, claim: Any) -> _Attempt:
        return _Attempt(self, self._inner.attempt(claim))

    async def release(self, claim: Any) -> bool:
        result: bool = await self._point("release", lambda: self._inner.release(claim))
        return result

    async def _point(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        plan = self.plan
        number = len(plan.calls)
        plan.calls.append(what)
        if number != plan.at or plan.victim is None:
            return await call()
        victim = plan.victim
        if plan.how == "before":
            plan.hit = True
            victim.cancel()
            await asyncio.sleep(0)  # the cancellation lands here when this is the victim's own task
            return await call()
        if plan.how == "after":
            result = await call()
            plan.hit = True
            victim.cancel()
            await asyncio.sleep(0)  # ... and here the reply is lost to it
            return result

        def hit() -> None:
            plan.hit = True

        return await _CancelAtSuspension(call(), plan.suspension, victim, hit)


@dataclass
class _Case:
    kind: str  # "lock", "write" or "fair"
    contended: bool

    def victim(self, store: distlock.AsyncStore, name: str) -> distlock.AsyncLock:
        if self.kind == "write":
            return store.rwlock(name, ttl=60).write
        return store.lock(name, ttl=60, fair=self.kind == "fair")

    def holder(self, store: distlock.AsyncStore, name: str) -> distlock.AsyncLock:
        if self.kind == "write":
            return store.rwlock(name, ttl=60).read  # a waiting writer leaves a mark that blocks new readers
        return store.lock(name, ttl=60, fair=self.kind == "fair")


async def _settled(store: distlock.AsyncStore, name: str, holders: int) -> distlock.LockInfo | None:
    """``inspect``, read again for a moment until it shows ``holders`` and no waiter.

    A ZooKeeper client reads from the server it is connected to, which may not have applied another
    session's latest writes yet; a real leftover (a 60 s lease, a node of a live session) never goes
    away in that time, so the checks after this still catch every one.
    """
    info = await store.inspect(name)
    for _ in range(30):
        if (len(info.holders) if info else 0) == holders and (info is None or info.waiters in (0, None)):
            break
        await asyncio.sleep(0.1)
        info = await store.inspect(name)
    return info


async def _run(
    proxy: _Backend, victim_store: distlock.AsyncStore, other: distlock.AsyncStore, case: _Case, name: str
) -> tuple[list[str], bool]:
    """One scenario under ``proxy.plan``; checks the end state. Returns (calls made, cancelled)."""
    plan = proxy.plan
    holder = case.holder(other, name) if case.contended else None
    if holder is not None:
        assert await holder.acquire(timeout=10)
    lock = case.victim(victim_store, name)

    async def victim() -> None:
        assert await lock.acquire(timeout=30)
        await lock.release()

    task = asyncio.create_task(victim())
    plan.victim = task
    holder_out = holder is None
    while not task.done():
        await asyncio.wait({task}, timeout=0.01)
        since = plan.waiting_since
        if not holder_out and since is not None and monotonic() - since > BLOCKED_AFTER:
            assert holder is not None
            await holder.release()
            holder_out = True
    cancelled = task.cancelled()
    if not cancelled:
        task.result()  # the scenario itself must not fail
    plan.victim = None
    where = f"{case} cut {plan.how}{plan.suspension if plan.how == 'during' else ''} call #{plan.at} of {plan.calls}"
    # a cut that happened is never swallowed: the task ends cancelled
    assert cancelled == plan.hit, where
    # the client holds nothing: no holding on the object, nothing tracked or renewed by the store
    assert lock._held() == [], where
    assert victim_store._acquirer.holdings() == [], where
    # the server agrees: only the holder (if it has not released yet), no waiter or queue entry left
    info = await _settled(other, name, 0 if holder_out else 1)
    assert (len(info.holders) if info else 0) == (0 if holder_out else 1), (where, info)
    if info is not None:
        assert info.waiters in (0, None), (where, info)
    if holder is not None and not holder_out:
        await holder.release()
        info = await _settled(other, name, 0)
        assert info is None or not info.holders, (where, info)
    # and another lock object on another store gets it at once (a leftover would block it for its 60 s TTL)
    fresh = [case.victim(other, name)] + ([other.rwlock(name, ttl=60).read] if case.kind == "write" else [])
    for probe in fresh:
        assert await probe.acquire(timeout=5), (where, probe)
        await probe.release()
    return list(plan.calls), cancelled


CASES = [_Case(kind, contended) for contended in (False, True) for kind in ("lock", "write", "fair")]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{'contended' if c.contended else 'free'}-{c.kind}")
async def test_cancel_at_every_backend_await_point(
    async_store: distlock.AsyncStore, backend_url: str, name: str, case: _Case
) -> None:
    caps = async_store.capabilities
    if case.kind == "write" and Mode.WRITE not in caps.modes:
        pytest.skip("this backend refuses read-write locks (declared in its capabilities)")
    if case.kind == "fair" and not (caps.fair or caps.always_fair):
        pytest.skip("this backend has no fair (FIFO) locks")
    other = await distlock.connect_async(backend_url)
    proxy = _Backend(async_store._acquirer.backend)
    async_store._acquirer.backend = proxy  # type: ignore[assignment]  # what the lock operations call
    try:
        counter = iter(range(10_000))
        proxy.plan = _Plan()
        calls, cancelled = await _run(proxy, async_store, other, case, f"{name}-{next(counter)}")
        assert not cancelled
        assert calls[0] == "try_acquire" and calls[-1] == "release", calls
        if case.contended:
            assert "wait" in calls, calls
        runs = 0
        for at in range(len(calls)):
            for how in ("before", "after"):
                proxy.plan = _Plan(at=at, how=how)
                await _run(proxy, async_store, other, case, f"{name}-{next(counter)}")
                runs += 1
            for j in range(MAX_SUSPENSIONS):
                proxy.plan = _Plan(at=at, how="during", suspension=j)
                _, cancelled = await _run(proxy, async_store, other, case, f"{name}-{next(counter)}")
                runs += 1
                if not cancelled:  # the call finished before its j-th suspension: no deeper point
                    break
        assert runs >= 3 * len(calls)
    finally:
        async_store._acquirer.backend = proxy._inner
        await other.aclose()
