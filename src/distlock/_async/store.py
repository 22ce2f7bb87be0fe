"""The store: one connection to one backend, the lock factories, the acquire loop and the renewer.

Written once for both sides: this file is the async source, ``_sync/store.py`` is generated from it.
"""

from __future__ import annotations

import functools
import importlib
import inspect as _inspect
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Self, TypeVar

from .. import _rt_async as rt
from .._core import ids
from .._core.timing import Deadline, monotonic
from .._core.types import Claim, Grant, LockInfo, Mode
from .._core.validate import check_name
from .._dist import install_hint
from .._errors import ConfigError, LockError, UnsupportedFeature
from .._given import client_config
from .._registry import BY_NAME
from .._url import StoreConfig, parse_url
from .backend import AsyncAttempt, AsyncBackend
from .lease import Holding, Leases
from .locks import AsyncLock, AsyncMultiLock, AsyncReadWriteLock, AsyncSemaphore, LostCallback

log = logging.getLogger("distlock")

F = TypeVar("F", bound=Callable[..., Any])

def _backend_class(config: StoreConfig) -> type[AsyncBackend]:
    row = BY_NAME[config.backend]
    extra = row.extra
    try:
        module = importlib.import_module(f"{__package__}.backends.{row.module}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in row.drivers and extra:
            raise ConfigError(
                f"the {config.backend} backend needs its driver: {install_hint(extra)}",
                backend=config.scheme,
            ) from None
        if exc.name and exc.name.startswith(f"{__package__}.backends"):
            raise UnsupportedFeature(
                f"the {config.backend} backend is not available in this version", backend=config.scheme
            ) from None
        raise
    cls: type[AsyncBackend] = module.Backend
    return cls


async def connect_async(url: str | None = None, *, client: object | None = None, **options: Any) -> AsyncStore:
    """Open a store. ``url=None``: ``$DISTLOCK_URL``, else the SQLite file in the user's state dir.

    ``client``: a driver object the caller already has: a redis-py client or ``ConnectionPool`` (asyncio ones
    on the async side, ``redis.Redis`` on the sync side), or a started kazoo ``KazooClient``. The backend is
    taken from its type and the URL may be left out (if given, it must name the same backend; its options
    apply). The store never closes a client it was given: close it yourself, after the store. Redis: the
    store makes its own connections from the client's connection parameters, with its own timeouts, and
    closes them. ZooKeeper: the store uses the client's session. A psycopg_pool pool lends its connection parameters; the
    store opens connections of its own with them (see docs/sql.md).
    """
    config = parse_url(url, options) if client is None else client_config(client, url, options)
    backend = await _backend_class(config).open(config)
    return AsyncStore(backend)


@dataclass(frozen=True)
class Acquired:
    """A successful acquire: the claim that won (its token may differ from the one asked with, see
    ``_acquire_at_backend``), the backend's grant, when the winning request was sent, and the local lease end."""

    claim: Claim
    grant: Grant
    sent: float
    expires_at: float


class AsyncStore:
    """A connection to one backend and the factory of lock objects. Thread-safe; one per process is the norm.

    Use as a context manager, or call :meth:`aclose`: that releases what is still held and stops the
    renewer.
    """

    def __init__(self, backend: AsyncBackend) -> None:
        self._backend = backend
        self.scheme = backend.scheme
        self.capabilities = backend.capabilities
        self._leases = Leases(backend, self._lose, backend.scheme)
        self._renewer = self._leases  # the name tests and benchmarks use for "what is being renewed"
        self._by_token: dict[str, Holding] = {}
        self._guard = threading.Lock()
        # Local waiting lines, per (name, mode): see _acquire. Entries are the waiters' wakers (the first
        # entry may be a plain marker: the first in line is never woken through the line).
        self._lines: dict[tuple[str, Mode], list[object]] = {}
        self._dispatcher = rt.Dispatcher()
        self._closed = False
        backend.set_loss_handler(self._backend_lost)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._backend.describe()}>"

    # -- factories -------------------------------------------------------------------------------------
    def lock(
        self,
        name: str,
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        *,
        fair: bool = False,
    ) -> AsyncLock:
        """A mutex. Re-acquiring it from the owner that holds it raises ``LockError`` (use :meth:`rlock`)."""
        return AsyncLock(self, name, ttl=ttl, timeout=timeout, auto_renew=auto_renew, on_lost=on_lost, fair=fair)

    def rlock(
        self,
        name: str,
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        *,
        fair: bool = False,
    ) -> AsyncLock:
        """A reentrant mutex: counted per owner (thread, or asyncio task on the async side)."""
        return AsyncLock(
            self, name, ttl=ttl, timeout=timeout, auto_renew=auto_renew, on_lost=on_lost, reentrant=True, fair=fair
        )

    def rwlock(
        self,
        name: str,
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        *,
        fair: bool = False,
    ) -> AsyncReadWriteLock:
        """A read-write lock: ``rw.read`` (shared) and ``rw.write`` (exclusive); writers are not starved."""
        return AsyncReadWriteLock(
            self, name, ttl=ttl, timeout=timeout, auto_renew=auto_renew, on_lost=on_lost, fair=fair
        )

    def semaphore(
        self,
        name: str,
        permits: int = 3,
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        *,
        fair: bool = False,
    ) -> AsyncSemaphore:
        """At most ``permits`` holders at once; each permit is its own lease."""
        return AsyncSemaphore(
            self,
            name,
            mode=Mode.SEMAPHORE,
            permits=permits,
            ttl=ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            on_lost=on_lost,
            fair=fair,
        )

    def multilock(
        self,
        names: Sequence[str],
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        *,
        fair: bool = False,
    ) -> AsyncMultiLock:
        """All of ``names`` or none, taken in sorted order so two multilocks cannot deadlock."""
        return AsyncMultiLock(
            self, list(names), ttl=ttl, timeout=timeout, auto_renew=auto_renew, on_lost=on_lost, fair=fair
        )

    def synchronized(self, name: str, **lock_options: Any) -> Callable[[F], F]:
        """Decorator: run the function while holding ``store.lock(name, **lock_options)``.

        ``kind="rlock"`` makes it reentrant (recursive functions). With the async store, decorate
        ``async def`` functions.
        """
        kind = lock_options.pop("kind", "lock")
        if kind not in ("lock", "rlock"):
            raise ConfigError(f"synchronized(kind=...) must be 'lock' or 'rlock', not {kind!r}", backend=self.scheme)
        lock = self.rlock(name, **lock_options) if kind == "rlock" else self.lock(name, **lock_options)

        def decorate(fn: F) -> F:
            if rt.IS_ASYNC and not _inspect.iscoroutinefunction(fn):
                raise ConfigError("the async store's synchronized() decorates async functions", backend=self.scheme)

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                async with lock:
                    return await fn(*args, **kwargs)

            wrapper.lock = lock  # type: ignore[attr-defined]
            return wrapper  # type: ignore[return-value]

        return decorate

    # -- admin -----------------------------------------------------------------------------------------
    async def inspect(self, name: str) -> LockInfo | None:
        """Who holds ``name`` now (owner ids, fences, seconds left), or None if nobody does."""
        return await self._backend.inspect(check_name(name, backend=self.scheme))

    async def list(self, prefix: str = "") -> list[LockInfo]:
        """Every held lock whose name starts with ``prefix``."""
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise ConfigError("prefix must be a str without NUL bytes", backend=self.scheme)
        return await self._backend.list(prefix)

    async def break_lock(self, name: str) -> bool:
        """Admin force release of every holding of ``name``; holders see ``lost``. True if anything was held."""
        return await self._backend.break_lock(check_name(name, backend=self.scheme))

    # -- lifecycle -------------------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Release everything still held, stop the renewer, close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for holding in self._leases.snapshot():
            try:
                await self._backend.release(holding.claim)
            except LockError as err:
                log.warning("close: could not release %r: %s", holding.claim.name, err)
            self._forget(holding)
        await self._leases.stop()
        self._dispatcher.close()
        await self._backend.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- used by the lock objects ----------------------------------------------------------------------
    def _check_supported(self, name: str, mode: Mode, fair: bool) -> None:
        caps = self.capabilities
        if mode not in caps.modes:
            raise UnsupportedFeature(f"{mode.value} locks are not supported here", name=name, backend=self.scheme)
        if fair and not (caps.fair or caps.always_fair):
            raise UnsupportedFeature("fair=True (FIFO) is not supported here", name=name, backend=self.scheme)
        if self._closed:
            raise LockError("the store is closed", name=name, backend=self.scheme)

    def _lines_up(self, claim: Claim, deadline: Deadline) -> bool:
        """Whether a blocking acquire waits in the store's local line (see _acquire)."""
        return (
            claim.mode in (Mode.EXCLUSIVE, Mode.WRITE)
            and not claim.fair
            and not self.capabilities.always_fair
            and not deadline.expired()
        )

    async def _acquire(self, claim: Claim, deadline: Deadline) -> Acquired | None:
        """Try until granted or the deadline passes; None if not granted in time.

        Blocking exclusive claims of one store on one name line up locally first, and only the first in
        line asks the backend: of N tasks or threads waiting here, at most one can be granted the lock at a
        time anyway, and letting all of them answer every release (a wake-up per waiter, a transaction per
        wake-up on SQLite and SQL) is a herd inside the process (F11 in docs/safety.md) that costs the holder's hand-off
        far more than the grant. Fair claims skip the line (the backend's queue is their order), and so do
        backends that always queue (each waiter already watches only its predecessor).
        """
        if self._closed:
            raise LockError("the store is closed", name=claim.name, backend=self.scheme)
        if not self._lines_up(claim, deadline):
            return await self._acquire_at_backend(claim, deadline)
        key = (claim.name, claim.mode)
        place: object
        with self._guard:
            line = self._lines.setdefault(key, [])
            place = rt.Waker() if line else object()
            line.append(place)
        try:
            if isinstance(place, rt.Waker):
                while True:
                    with self._guard:
                        if self._lines[key][0] is place:
                            break
                    left = deadline.remaining()
                    if left is not None and left <= 0:
                        return None
                    await place.wait(left)
            return await self._acquire_at_backend(claim, deadline)
        finally:
            with self._guard:
                line = self._lines[key]
                was_first = line[0] is place
                line.remove(place)
                nxt = line[0] if was_first and line else None
                if not line:
                    del self._lines[key]
            if isinstance(nxt, rt.Waker):
                nxt.notify()

    async def _acquire_at_backend(self, claim: Claim, deadline: Deadline) -> Acquired | None:
        """The backend's part of _acquire: on any way out without the lock (timeout, error, cancellation)
        the attempt is abandoned, which removes whatever the backend may have written for it, even a
        holding whose reply was lost (F10).

        A grant whose reply came after its own local lease end is no success (F3): by then the server may
        have granted the lock to someone else. It is abandoned like a failed try and the claim tries again,
        with a fresh token, while the deadline allows.
        """
        attempt: AsyncAttempt = self._backend.attempt(claim)
        try:
            while True:
                sent = monotonic()
                grant = await attempt.try_acquire()
                if grant.acquired:
                    end = self._leases.grant_end(claim, grant, sent)  # +inf where a session backs it
                    if monotonic() < min(end, self._leases.session_deadline(claim)):
                        return Acquired(claim, grant, sent, end)
                    log.warning("grant of %r arrived after its lease ended; trying again", claim.name)
                    await rt.shielded(attempt.abandon())
                    claim = replace(claim, token=ids.new_token())
                    attempt = self._backend.attempt(claim)
                    if deadline.expired():
                        return None
                    continue
                left = deadline.remaining()
                if left is not None and left <= 0:
                    await rt.shielded(attempt.abandon())
                    return None
                await attempt.wait(grant, left)
        except BaseException:
            try:
                await rt.shielded(attempt.abandon())
            except Exception as err:  # noqa: BLE001 - report the original error, not the clean-up's
                log.warning("could not clean up after a failed acquire of %r: %s", claim.name, err)
            raise

    async def _release(self, holding: Holding) -> bool:
        # Stop renewing first: a renewal in flight that meets the release must not report the lock as lost.
        self._forget(holding)
        return await self._backend.release(holding.claim)

    def _register(self, holding: Holding) -> None:
        with self._guard:
            self._by_token[holding.claim.token] = holding
        self._leases.add(holding)

    def _forget(self, holding: Holding) -> None:
        with self._guard:
            self._by_token.pop(holding.claim.token, None)
        self._leases.discard(holding)

    def _check_expiry(self, holding: Holding) -> None:
        """Lose a holding whose lease ran out locally (e.g. the process was paused past its TTL)."""
        self._leases.check(holding)

    def _lose(self, holding: Holding, reason: str) -> None:
        """Mark a holding lost: set its event, stop renewing it, call the callbacks once, off the critical path."""
        with self._guard:  # the clock, the renewer, a driver thread and the caller may all find it at once
            if holding.lost_reason:
                return
            holding.lost_reason = reason or "lost"
        holding.lost.set()
        self._forget(holding)
        log.warning("lock %r lost: %s", holding.claim.name, reason)
        for cb in list(holding.lock._callbacks):
            self._dispatcher.run_callback(cb, holding.lock)

    def _backend_lost(self, token: str, reason: str) -> None:
        with self._guard:
            holding = self._by_token.get(token)
        if holding is not None:
            self._dispatcher.call(lambda: self._lose(holding, reason))
