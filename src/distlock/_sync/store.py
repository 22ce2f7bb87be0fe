# GENERATED from src/distlock/_async/store.py by scripts/gen_sync.py: edit that file, not this one.
"""The store: one connection to one backend, the lock factories and the admin calls.

The lock objects it makes call its ``AsyncAcquirer`` (the acquire loop and the
holdings, with the lease clock under it); the store builds that, and closes it before the backend.

Written once for both sides: this file is the async source, ``_sync/store.py`` is generated from it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect as _inspect
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Callable, Sequence
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

from .. import _idiom_sync as idiom
from .. import _rt_sync as rt
from .._core import forks, ids, template
from .._core.types import LeaderInfo, LockInfo, Mode, PrimitiveInfo
from .._core.validate import check_reason, check_timeout
from .._dist import install_hint
from .._errors import ConfigError, UnsupportedFeature
from .._given import client_config, given_client_name
from .._registry import BY_NAME, module_of
from .._url import StoreConfig, parse_url
from .acquirer import SyncAcquirer
from .backend import SyncBackend
from .barrier import Barrier, DoubleBarrier
from .election import Election, check_elections, leader, observe
from .held import LostCallback
from .latch import Latch
from .listing import Snapshot, snapshots
from .locks import Lock, ReadWriteLock
from .multilock import MultiLock
from .once import Once, at_most_once
from .semaphore import Semaphore

log = logging.getLogger("distlock")

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


def _synchronized(
    lock_for: Callable[[tuple[Any, ...], dict[str, Any]], Lock],
    lock: Lock | None,
    scheme: str,
    fn: F,
) -> F:
    """``fn`` run under the lock ``lock_for`` gives for each call (the store's ``synchronized``)."""
    if rt.IS_ASYNC and not _inspect.iscoroutinefunction(fn):
        raise ConfigError("the async store's synchronized() decorates async functions", backend=scheme)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with lock_for(args, kwargs):
            return fn(*args, **kwargs)

    wrapper.lock = lock  # type: ignore[attr-defined]
    wrapper.lock_for = lambda *args, **kwargs: lock_for(args, kwargs)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _backend_class(config: StoreConfig) -> type[SyncBackend]:
    row = BY_NAME[config.backend]
    extra = row.extra
    path = module_of(row, "_sync")  # "_sync" in the generated twin
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in row.drivers and extra:
            raise ConfigError(
                f"the {config.backend} backend needs its driver: {install_hint(extra)}",
                backend=config.scheme,
            ) from None
        if exc.name and (path == exc.name or path.startswith(f"{exc.name}.")):  # the backend's own module
            raise UnsupportedFeature(
                f"the {config.backend} backend is not available in this version", backend=config.scheme
            ) from None
        raise
    cls: type[SyncBackend] = module.Backend
    return cls


@idiom.opener
def connect(url: str | None = None, *, client: object | None = None, **options: Any) -> Store:
    """Open a store. ``url=None``: ``$DISTLOCK_URL``, else the host's SQLite store (docs/sqlite.md).

    On the asyncio side, ``await connect_async(...)`` gives the store (close it: ``aclose()`` or ``async
    with store:``), and ``async with connect_async(...) as store:`` opens it and closes it on exit.

    ``client``: a driver object the caller already has: a redis-py client or ``ConnectionPool`` (asyncio ones
    on the async side, ``redis.Redis`` on the sync side), or a started kazoo ``KazooClient``. The backend is
    taken from its type and the URL may be left out (if given, it must name the same backend; its options
    apply). The store never closes a client it was given: close it yourself, after the store. Redis: the
    store makes its own connections from the client's connection parameters, with its own timeouts, and
    closes them. ZooKeeper: the store uses the client's session. A psycopg_pool pool lends its connection parameters; the
    store opens connections of its own with them (see docs/sql.md).

    ``client_name`` (keyword or URL option; default ``$DISTLOCK_CLIENT_NAME``): a label for this store's
    holdings, which every ``inspect``, ``distlock status`` and ``list`` shows next to the owner id, and the
    log events and metrics carry. On Redis it is also the connections' CLIENT SETNAME, as in redis-py.
    """
    warned = idiom.blocks_event_loop()  # (the sync side) opening blocks a running event loop too
    config = parse_url(url, options) if client is None else client_config(client, url, options)
    client_name = _client_name(config)
    backend = _backend_class(config).open(config)
    store = Store(backend, client_name)
    store._acquirer.loop_warned |= warned  # said once per store: not again at its first call
    return store


def _client_name(config: StoreConfig) -> str | None:
    """The store's client name: the ``client_name`` option, else ``$DISTLOCK_CLIENT_NAME``, else None. Redis
    keeps the option for redis-py (its connections' CLIENT SETNAME); the other backends take it out."""
    redis = config.backend in ("redis", "redlock")
    given = config.params.get("client_name") if redis else config.pop("client_name")
    if given is not None:
        return ids.check_client_name(given, backend=config.scheme)
    client = getattr(config, "client", None)
    if redis and client is not None and (own := given_client_name(client)) is not None:
        # connect(client=...): the name the caller's redis-py client carries (its CLIENT SETNAME) labels the
        # store too, if it can (one with a ":" or "@" cannot: the store's connections keep it all the same)
        with contextlib.suppress(ConfigError):
            return ids.check_client_name(own, backend=config.scheme)
    env = os.environ.get(ids.CLIENT_NAME_ENV)
    if not env:
        return None
    name = ids.check_client_name(env, backend=config.scheme, source=f"${ids.CLIENT_NAME_ENV}")
    if redis:
        config.params["client_name"] = name
    return name


class Store(idiom.SyncOnly):
    """A connection to one backend and the factory of lock objects. Thread-safe; one per process is the norm.

    Use as a context manager, or call ``aclose``: that releases what is still held and stops the
    renewer.
    """

    def __init__(self, backend: SyncBackend, client_name: str | None = None) -> None:
        self._backend = backend
        self.scheme = backend.scheme
        self.capabilities = backend.capabilities
        #: the label of this store's holdings (``connect(..., client_name=...)``), None without one
        self.client_name = client_name
        #: what the lock objects call: the acquire loop and the holdings (test hook: ``_acquirer.holdings()``)
        self._acquirer = SyncAcquirer(backend, client_name)
        self._gen = forks.generation()  # a forked child's copy never closes the connections (aclose)

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
        max_hold: float | None = None,
    ) -> Lock:
        """A mutex. Re-acquiring it from the owner that holds it raises ``LockError`` (use ``rlock``).
        ``max_hold`` (every kind): a lease cap, each holding lost and released that long after its grant."""
        return Lock(
            self, name, ttl=ttl, timeout=timeout, auto_renew=auto_renew, on_lost=on_lost, fair=fair, max_hold=max_hold
        )

    def rlock(
        self,
        name: str,
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        *,
        fair: bool = False,
        max_hold: float | None = None,
    ) -> Lock:
        """A reentrant mutex: counted per owner (thread, or asyncio task on the async side)."""
        return Lock(
            self, name, ttl=ttl, timeout=timeout, auto_renew=auto_renew, on_lost=on_lost, reentrant=True, fair=fair,
            max_hold=max_hold,
        )  # fmt: skip

    def rwlock(
        self,
        name: str,
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        *,
        fair: bool = False,
        max_hold: float | None = None,
    ) -> ReadWriteLock:
        """A read-write lock: ``rw.read`` (shared) and ``rw.write`` (exclusive); writers are not starved."""
        return ReadWriteLock(
            self, name, ttl=ttl, timeout=timeout, auto_renew=auto_renew, on_lost=on_lost, fair=fair, max_hold=max_hold
        )

    def semaphore(
        self,
        name: str,
        permits: int | None = 3,
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        *,
        fair: bool = False,
        max_hold: float | None = None,
    ) -> Semaphore:
        """A counting semaphore of capacity ``permits`` (None: the capacity stored on the server while the
        semaphore is in use governs). ``acquire(permits=n)`` takes ``n`` at once, as one holding with its own lease
        and fence; ``set_permits`` resizes it for everyone."""
        return Semaphore(
            self,
            name,
            mode=Mode.SEMAPHORE,
            permits=permits,
            ttl=ttl,
            timeout=timeout,
            auto_renew=auto_renew,
            on_lost=on_lost,
            fair=fair,
            max_hold=max_hold,
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
        max_hold: float | None = None,
    ) -> MultiLock:
        """All of ``names`` or none, taken in sorted order so two multilocks cannot deadlock."""
        return MultiLock(
            self, list(names), ttl=ttl, timeout=timeout, auto_renew=auto_renew, on_lost=on_lost, fair=fair,
            max_hold=max_hold,
        )  # fmt: skip

    def synchronized(self, name: str, **lock_options: Any) -> Callable[[F], F]:
        """Decorator: run the function while holding ``store.lock(name, **lock_options)``.

        ``kind="rlock"`` makes it reentrant (recursive functions). With the async store, decorate
        ``async def`` functions.

        ``name`` may be a template of the call's arguments: ``synchronized("order/{order_id}")`` locks
        ``order/42`` for ``f(order_id=42)`` (``str.format`` fields naming the function's parameters, defaults
        filled in; ``{{`` is a literal brace). A field that is no parameter is a ``ConfigError`` when the
        function is decorated. The decorated function's ``lock`` is the one lock object of a literal name;
        for a template it is None and ``lock_for(*args, **kwargs)`` gives the lock object of a call's name
        (calls of one name share one object while any of them runs, so ``kind="rlock"`` re-enters).
        """
        kind = lock_options.pop("kind", "lock")
        if kind not in ("lock", "rlock"):
            raise ConfigError(f"synchronized(kind=...) must be 'lock' or 'rlock', not {kind!r}", backend=self.scheme)
        make = self.rlock if kind == "rlock" else self.lock
        roots = template.fields(name, backend=self.scheme) if isinstance(name, str) else None
        if roots is None:
            lock = make(name, **lock_options)
            return functools.partial(_synchronized, lambda _args, _kwargs: lock, lock, self.scheme)
        try:  # the options are checked now (their values at the first lock object, as for any lock)
            _inspect.signature(make).bind(name, **lock_options)
        except TypeError as exc:
            raise ConfigError(f"synchronized(): {exc}", backend=self.scheme) from None

        def decorate(fn: F) -> F:
            names = template.NameTemplate(name, fn, roots, backend=self.scheme)
            # one lock object per name while a call of it runs (its frame keeps it alive), so that an rlock
            # re-enters and a second call of one owner finds its own holding; none kept for names no call uses
            live: weakref.WeakValueDictionary[str, Lock] = weakref.WeakValueDictionary()
            mutex = threading.Lock()

            def lock_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Lock:
                key = names.name_of(args, kwargs)
                with mutex:
                    lock = live.get(key)
                    if lock is None:
                        lock = live[key] = make(key, **lock_options)
                    return lock

            return _synchronized(lock_for, None, self.scheme, fn)

        return decorate

    def once(self, name: str, at_most: float = 600.0, at_least: float = 0.0, *, keep_alive: bool = False) -> Once:
        """An at-most-once run of the job ``name`` (ShedLock's semantics, docs/operations.md):
        ``with store.once(name, at_most=600, at_least=30) as ran: if ran: ...``.

        Never waits: if anyone holds ``name`` the run is skipped (``ran`` is false). ``at_most`` is the lease
        (renewed only with ``keep_alive=True``); on exit the lock is kept until ``at_least`` seconds after the
        start, then it ends by itself.
        """
        return Once(self, name, at_most=at_most, at_least=at_least, keep_alive=keep_alive)

    def at_most_once(
        self, name: str, at_most: float = 600.0, at_least: float = 0.0, *, keep_alive: bool = False
    ) -> Callable[[rt.Job[P, R]], rt.Job[P, R | None]]:
        """Decorator: run the function inside ``once``; its result when it ran, None when it was skipped.
        With the async store, decorate ``async def`` functions."""
        once = self.once(name, at_most=at_most, at_least=at_least, keep_alive=keep_alive)

        def decorate(fn: rt.Job[P, R]) -> rt.Job[P, R | None]:
            return at_most_once(once, fn)

        return decorate

    def election(
        self, name: str, ttl: float = 30.0, timeout: float | None = None, on_lost: LostCallback | None = None
    ) -> Election:
        """A candidate in the leader election ``name`` (docs/election.md): ``campaign()``, ``proclaim()``,
        ``resign()``, ``is_leader()``, ``term``, ``lost``; ``with election:`` campaigns and resigns."""
        return Election(self, name, ttl=ttl, timeout=timeout, on_lost=on_lost)

    def latch(self, name: str, count: int | None = None, *, linger: float = 60.0) -> Latch:
        """A count-down latch on the server (docs/getting-started.md): ``count_down()``, ``wait(timeout)``,
        ``count()``. ``count=N`` creates it with N at the first call unless it exists (with another count:
        ``ConfigError``); ``count=None`` joins an existing one. Once at zero, a marker stays ``linger`` seconds
        so that late creators and waiters see it done, then nothing of it is left."""
        return Latch(self, name, count, linger=linger)

    def barrier(self, name: str, parties: int, *, ttl: float = 10.0, linger: float = 60.0) -> Barrier:
        """A barrier on the server (docs/getting-started.md): ``wait(timeout)`` blocks until ``parties``
        participants arrived. Each arrival is a lease of ``ttl`` seconds, renewed while it waits, so a
        participant whose process died stops counting; the tripped marker stays until every member saw it (at
        most ``linger`` seconds), then nothing of the barrier is left."""
        return Barrier(self, name, parties, ttl=ttl, linger=linger)

    def double_barrier(self, name: str, parties: int, *, ttl: float = 10.0, linger: float = 60.0) -> DoubleBarrier:
        """A double barrier on the server (docs/getting-started.md): ``enter(timeout)`` blocks until ``parties``
        members entered, ``leave(timeout)`` until all of them left. On ZooKeeper, Curator's
        ``DistributedDoubleBarrier`` layout (members are session-bound nodes); elsewhere each entry is a lease of
        ``ttl`` seconds while entering, and a member that does not leave within ``linger`` seconds of the trip
        no longer holds the others' ``leave``."""
        return DoubleBarrier(self, name, parties, ttl=ttl, linger=linger)

    def leader(self, name: str) -> LeaderInfo | None:
        """The current leader of the election ``name`` (value, owner, term, seconds left), or None."""
        name = self._acquirer.check_name(name)
        check_elections(self._acquirer, name)
        return leader(self._acquirer, name)

    def observe(self, name: str, timeout: float | None = None) -> Iterator[LeaderInfo | None]:
        """The current leader of ``name`` (None: no leader), then every change of leader or value, in order,
        until ``timeout`` seconds have passed (None: for ever). A lost leader is reported as None."""
        name = self._acquirer.check_name(name)
        check_elections(self._acquirer, name)
        self._acquirer.blocking()
        return observe(self._acquirer, name, check_timeout(timeout, name=name, backend=self.scheme))

    # -- admin -----------------------------------------------------------------------------------------
    def inspect(self, name: str) -> LockInfo | None:
        """Who holds ``name`` now (owner ids, fences, seconds left), or None if nobody does."""
        return self._acquirer.inspect(self._acquirer.check_name(name))

    def check_fence(self, name: str, fence: int) -> bool:
        """Is ``fence`` still the fence of a current holding of ``name``? (Chubby's CheckSequencer: a resource
        given a fence asks the lock service before it acts.) One ``inspect`` round trip; True also for a holding
        that a holder already lost locally but the server still counts, which ends within its lease."""
        info = self.inspect(name)
        return info is not None and any(h.fence == fence for h in info.holders)

    def list(self, prefix: str = "") -> list[LockInfo]:
        """Every held lock whose name starts with ``prefix``."""
        self._acquirer.blocking()
        return self._backend.list(self._prefix(prefix))

    def _list_primitives(self, prefix: str = "") -> Sequence[PrimitiveInfo] | None:
        """The latches and barriers whose names start with ``prefix`` (``distlock list``); None where the
        backend cannot list them."""
        self._acquirer.blocking()
        return self._backend.list_primitives(self._prefix(prefix))

    def watch_list(self, prefix: str = "", tick: float | None = None) -> Iterator[Snapshot]:
        """The held locks under ``prefix`` now, then again each time they change (for ever): what ``distlock
        list --watch`` shows. Pushed where the backend can (etcd), else read again every half second; a change
        of seconds left alone is not a change. With ``tick``, the last snapshot is also repeated every
        ``tick`` seconds (``changed=False``), for a live countdown."""
        self._acquirer.blocking()
        return snapshots(self._backend, self._prefix(prefix), tick)

    def _prefix(self, prefix: str) -> str:
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise ConfigError("prefix must be a str without NUL bytes", backend=self.scheme)
        return prefix

    def break_lock(self, name: str) -> bool:
        """Admin force release of every holding of ``name``; holders see ``lost``. True if anything was held."""
        self._acquirer.blocking()
        return self._backend.break_lock(self._acquirer.check_name(name))

    def request_release(self, name: str, reason: str = "") -> bool:
        """Ask the current holder(s) of ``name`` to release it: each holding's ``revoke_requested`` is set and
        its ``on_revoke`` callbacks get ``reason`` (how soon, per backend: docs/getting-started.md, "Revocation").
        The holder decides; nothing is released or broken here. True if there was a holder to ask; False (and
        nothing written) if ``name`` is free."""
        name = self._acquirer.check_name(name)
        reason = check_reason(reason, name=name, backend=self.scheme)
        self._acquirer.blocking()
        return self._backend.request_release(name, reason)

    # -- lifecycle -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release everything still held, stop the renewer, close the connection. Idempotent."""
        if self._acquirer.closed:
            return
        self._acquirer.blocking()  # (the sync side) closing waits on the backend too
        self._acquirer.close()
        if self._gen != forks.generation() and not self._backend.fork_owned:
            # a forked child's copy whose connections may be the parent's too: closing one can speak on it (a TLS
            # close) or take it out of the parent's event loop: leave them to the parent and the exit
            return
        self._backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
