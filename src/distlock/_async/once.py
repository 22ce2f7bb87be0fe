"""At-most-once jobs: ``store.once(name, at_most=..., at_least=...)`` and ``@store.at_most_once(...)``.

ShedLock's semantics over any lock of the store. Entering never waits: one try of a mutex whose lease is
``at_most`` (renewed only with ``keep_alive=True``), and if anyone holds the name the job is skipped. On exit
(the job returned or raised), if less than ``at_least`` has passed since the start, the holding is not
released but shortened so that it ends ``at_least`` after the start: an instance whose clock or schedule runs
a little late then finds the name still held and skips, instead of running the job a second time.

Shortening is the backend's ``shorten(claim, ttl)`` (``backend.py``): one guarded, atomic step that touches
only our own holding, with the remaining time counted by the server where it keeps the lease (a renewal to
that TTL on Redis, Redlock, the SQL lease tables and SQLite; a new lease on etcd). Backends with no lease per
holding (ZooKeeper's ephemeral nodes, the SQL session modes) cannot leave a lock behind that ends by itself:
there the exit keeps holding the lock in this process until ``at_least`` has passed, then releases it, so a
process that dies before that frees it early (docs/operations.md).
"""

from __future__ import annotations

import functools
import inspect as _inspect
import logging
import math
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Literal, ParamSpec, TypeVar

from .. import _idiom_async as idiom
from .. import _rt_async as rt
from .._core import forks
from .._core.text import seconds
from .._core.timing import monotonic
from .._core.validate import check_ttl
from .._errors import ConfigError, LockError, LockLost, UnsupportedFeature
from .clock import Holding
from .held import LostCallback
from .locks import AsyncLock

if TYPE_CHECKING:
    from .store import AsyncStore

log = logging.getLogger("distlock")

P = ParamSpec("P")
R = TypeVar("R")


def check_at_least(at_least: float, at_most: float, *, name: str, backend: str) -> float:
    """``at_least``: finite, >= 0 and no longer than ``at_most`` (the lease cannot outlast itself)."""
    if isinstance(at_least, bool) or not isinstance(at_least, (int, float)):
        raise ConfigError(f"at_least must be a number of seconds, not {at_least!r}", name=name, backend=backend)
    value = float(at_least)
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ConfigError(f"at_least must be finite and >= 0, not {at_least!r}", name=name, backend=backend)
    if value > at_most:
        raise ConfigError(
            f"at_least ({seconds(value)}) must not exceed at_most ({seconds(at_most)})", name=name, backend=backend
        )
    return value


class AsyncRan:
    """What ``with store.once(...) as ran`` gives: true when this call runs the job, false when it was skipped.

    While the job runs, ``fence`` is its holding's fencing token and ``lost`` the holding's event, set if the
    lock is lost meanwhile (``at_most`` ran out, renewal failed, an admin broke it): a long job checks it
    between steps. A skipped run has no fence and an event that is never set. ``shortened`` tells, after the
    exit, whether the lock was left to end ``at_least`` after the start instead of being released.
    """

    def __init__(self, name: str, holding: Holding | None, started: float, lost: rt.Event) -> None:
        self.name = name
        self.started = started  # monotonic: when the job's try began (the start ``at_least`` counts from)
        self._holding = holding
        self.fence: int | None = holding.fence if holding is not None else None
        self.lost = lost
        self.shortened = False

    def __bool__(self) -> bool:
        return self._holding is not None

    def on_lost(self, callback: LostCallback) -> LostCallback:
        """Register ``callback(lock)``, called once (off the critical path) if the job's holding is lost."""
        if self._holding is not None:
            self._holding.callbacks.append(callback)  # the list of this run's own lock object
        return callback

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {'ran, fence ' + str(self.fence) if self else 'skipped'}>"


if TYPE_CHECKING:
    # What entering ``store.once(...)`` gives, for type checkers: ``if ran:`` tells a run from a skip as
    # ``bool(ran)`` does at run time, so that inside it ``ran.fence`` is an ``int`` (a skip's is None).

    class AsyncRanJob(AsyncRan):
        fence: int

        def __bool__(self) -> Literal[True]: ...

    class AsyncRanSkip(AsyncRan):
        fence: None

        def __bool__(self) -> Literal[False]: ...


class AsyncOnce(idiom.AsyncOnly):
    """``store.once(name, at_most, at_least)``: ``with`` (``async with``) gives a ``Ran``; the job runs if it is
    true.

    One object may be entered by many tasks (threads on the sync side) and again after it was left: each
    entry is its own try with its own holding.
    """

    def __init__(
        self, store: AsyncStore, name: str, *, at_most: float, at_least: float, keep_alive: bool = False
    ) -> None:
        scheme = store.scheme
        self.name = store._acquirer.check_name(name)
        self.at_most = check_ttl(at_most, name=self.name, backend=scheme)
        self.at_least = check_at_least(at_least, self.at_most, name=self.name, backend=scheme)
        self.keep_alive = bool(keep_alive)
        self._store = store
        AsyncLock(store, self.name)  # refused at build, as every lock object is (a closed store)
        self._runs: dict[object, list[tuple[AsyncRan, AsyncLock]]] = {}  # per owner: its entries, innermost last
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} at_most={self.at_most:g} at_least={self.at_least:g}>"

    async def __aenter__(self) -> AsyncRanJob | AsyncRanSkip:
        started = monotonic()
        # a lock object per entry: its holding is this entry's alone, whoever else enters the same object
        lock = AsyncLock(self._store, self.name, ttl=self.at_most, auto_renew=self.keep_alive)
        holding = lock._own_holding() if await lock.acquire(blocking=False) else None
        ran = AsyncRan(self.name, holding, started, lock.lost)  # a skip's lost: the idle event, never set
        with self._mutex:
            self._runs.setdefault(rt.owner_key(), []).append((ran, lock))
        return ran  # type: ignore[return-value]  # a run or a skip, as its truth says

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        key = rt.owner_key()
        with self._mutex:
            mine = self._runs[key]
            ran, lock = mine.pop()
            if not mine:
                del self._runs[key]
        holding = ran._holding
        if holding is None or holding.gen != forks.generation():
            return  # skipped; or a forked child leaving the run its parent started (the parent's to finish)
        # The job's exception wins: at_least still applies (ShedLock does the same), a loss is only logged.
        try:
            await self._finish(ran, lock, holding)
        except LockError as err:
            if exc_type is None:
                raise
            log.warning("ending the at-most-once run of %r after an error in the job: %s", self.name, err)

    async def _finish(self, ran: AsyncRan, lock: AsyncLock, holding: Holding) -> None:
        """Release the holding, or leave it to end ``at_least`` after the start; ``LockLost`` if it was lost."""
        core = self._store._acquirer
        left = self.at_least - (monotonic() - ran.started)
        if left > 0 and not core.clock.check(holding):
            try:
                await core.shorten(holding, left)
            except UnsupportedFeature:
                # no lease on the server to shorten: keep holding here until start + at_least (or a loss)
                try:
                    await rt.wait_event(core.lost_event(holding), self.at_least - (monotonic() - ran.started))
                except BaseException:  # cancelled or interrupted: let go now, as a process that dies would
                    await rt.shielded(lock._release_holding(holding))
                    raise
            except BaseException:
                lock._forget(holding)  # lost, or the outcome unknown: this lock holds it no more either way
                raise
            else:
                ran.shortened = True
                lock._forget(holding)
                return
        if holding.lost.is_set():
            lock._forget(holding)
            raise LockLost(f"lost while the job ran: {holding.lost_reason}", name=self.name, backend=core.scheme)
        if not await rt.shielded(lock._release_holding(holding)):
            if not holding.lost.is_set():
                core.lose(holding, "the lease was gone when the job ended")
            raise LockLost(f"lost while the job ran: {holding.lost_reason}", name=self.name, backend=core.scheme)


def at_most_once(once: AsyncOnce, fn: rt.Job[P, R]) -> rt.Job[P, R | None]:
    """``@store.at_most_once(...)``: run ``fn`` inside ``once``; its result when it ran, None when skipped."""
    if rt.IS_ASYNC and not _inspect.iscoroutinefunction(fn):
        raise ConfigError("the async store's at_most_once() decorates async functions", backend=once._store.scheme)

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
        async with once as ran:
            if ran:
                return await fn(*args, **kwargs)
        return None

    wrapper.once = once  # type: ignore[attr-defined]
    return wrapper
