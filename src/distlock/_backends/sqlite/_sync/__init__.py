# GENERATED from src/distlock/_backends/sqlite/_async/__init__.py by scripts/gen_sync.py: edit that file, not this one.
"""Embedded backends: ``sqlite://`` (a file, correct across processes on one host) and ``memory://``.

Every operation is one short ``BEGIN IMMEDIATE`` transaction (the database write lock is taken up front,
so no two processes can both see a free lock and both take it), in WAL mode with a busy timeout. The
grant rule is ``distlock._core.arbiter``. Expiry uses the wall clock (``time.time()``): every process
on the host shares it. Schema (created on first use, idempotent): see ``queries.py``.

Waiting: waiters in the same process are woken at once by the releaser (a process-wide registry of
wakers per database and name, which wakes the earliest waiter only: see ``_wakeup.Wakers``). Across processes
a datagram to each waiting process's socket of the name (``_wakeup.WakeDir``, shared by the process's waiters:
``_Hub``); where sockets are unusable a waiter re-checks with capped exponential backoff and jitter (2 ms
growing to 50 ms), and never later than the holder's lease end. ``memory://`` is the same code on one process-wide in-memory database.

The driver (Python's ``sqlite3``) blocks, so the async side runs each transaction in a worker thread.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from .... import _hostdir
from .... import _rt_sync as rt
from ...._sync.backend import SyncAttempt, SyncBackend, SyncWatch
from ...._core import arbiter, forks
from ...._core.timing import LEASE_WAIT_SLICE, WAITER_TTL, Backoff, monotonic, wait_slice
from ...._core.types import Capabilities, Claim, Grant, LockInfo, Mode
from ...._errors import BackendError
from ...._url import StoreConfig
from ...._wakeup import WakeDir, Wakers, WakeSocket
from .. import procs
from .. import queries as sql

T = TypeVar("T")

#: this process and the judge of other processes on the host (``procs``)
_LOCAL = procs.Local()

#: how long a fork waits for the SQLite work other threads have in flight (``_hold_for_fork``)
FORK_WAIT = 1.0


def _connect_file(path: Path, busy: float, shared: bool) -> sqlite3.Connection:
    """``shared``: a database every user writes (the host's default store), used only if its name is no
    symbolic link (another user may have put one in its place, see ``_hostdir``). SQLite resolves the links of
    a name before it opens the file, and opens the result without following a link: so if the name it opened
    is the one given, no link led anywhere, and none can any more."""
    conn = sqlite3.connect(str(path), timeout=busy, check_same_thread=False, isolation_level=None)
    if shared:
        opened = conn.execute("PRAGMA database_list").fetchone()[2]
        if opened != os.path.join(os.path.realpath(path.parent), path.name):
            conn.close()
            raise sqlite3.OperationalError(f"{str(path)!r} is a symbolic link (to {opened!r}): not followed")
    return conn


class _Hub:
    """This process's one wake socket of a (database, name), shared by its waiters and observers of the name.
    The first of them (``reader``) reads it and passes each wake-up on through ``_Shared.wakers``; when it
    leaves, the role goes to the next, whose wait it ends (``kick``) so that it starts reading."""

    def __init__(self, socket: WakeSocket) -> None:
        self.socket = socket
        self.ears: dict[_Ear, None] = {}  # in joining order; changed under _Shared.guard

    def reader(self) -> _Ear | None:
        return next(iter(self.ears), None)


def _close_memory() -> None:
    """At exit: the process's in-memory database (a forked child's own, not the copy of its parent's)."""
    with _Shared.guard:
        memory = _Shared.memory
    if memory is not None:
        conn, guard = memory
        with guard:
            conn.close()


class _Shared:
    """Process-wide state: the waiting attempts per (database, name), their wake sockets, and the one
    in-memory database."""

    wakers: Wakers[tuple[str, str]] = Wakers()
    hubs: dict[tuple[str, str], _Hub] = {}
    guard = threading.Lock()
    memory: tuple[sqlite3.Connection, threading.Lock] | None = None
    at_exit = False  # _close_memory is registered
    gen = forks.generation()
    #: every store of the process, whose guard a fork takes first (weakly held: a store that is gone needs none)
    stores: weakref.WeakSet[Backend] = weakref.WeakSet()
    #: the guards a fork took (``_hold_for_fork``): in the child, their connections were idle at the fork
    held: list[threading.Lock] = []

    @classmethod
    def own(cls) -> None:
        """In a forked child, once: a guard of its own, none of the parent's wake sockets (each is bound to a
        path the parent's waiters read: never closed here, which would unlink it), and no in-memory database
        (the copy of the parent's holds the parent's holdings, which nobody in the child holds; and a thread
        of the parent may have been inside it). The child makes its own on first use."""
        if cls.gen == forks.generation():
            return
        cls.gen = forks.generation()
        forks.abandon(cls.hubs, cls.memory)
        cls.hubs = {}
        cls.memory = None
        cls.guard = threading.Lock()

    @classmethod
    def memory_db(cls) -> tuple[sqlite3.Connection, threading.Lock]:
        """The process's in-memory database, made on first use."""
        cls.own()
        with cls.guard:
            if cls.memory is None:
                conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
                cls.memory = (conn, threading.Lock())
                sql.create_schema(conn)
                if not cls.at_exit:
                    # the process-wide database lives as long as the process: closed at its exit, under its
                    # guard (Python 3.13 warns of a connection the garbage collector finds open: ResourceWarning)
                    cls.at_exit = True
                    atexit.register(_close_memory)
            return cls.memory


def _hold_for_fork() -> None:
    """Before a fork: take every SQLite guard of the process, a bounded wait in all, so that no other thread
    is inside SQLite at the fork. SQLite's own mutexes (its allocator's, a connection's) are plain pthread
    mutexes: one another thread holds at the fork stays held in the child, whose first SQLite call would wait
    on it for ever. A guard not free in time (a transaction waiting for another process's write lock) is left
    as it is, and the child never touches its connection (``Backend.after_fork``)."""
    end = time.monotonic() + FORK_WAIT
    guards = {id(g): g for g in [_Shared.guard, *(b._guard for b in list(_Shared.stores))]}  # memory: one
    held = []
    for guard in guards.values():
        if guard.acquire(timeout=max(0.0, end - time.monotonic())):
            held.append(guard)
    _Shared.held = held


def _let_go_in_parent() -> None:
    held, _Shared.held = _Shared.held, []
    for guard in reversed(held):
        guard.release()


def _let_go_in_child() -> None:
    """After the stores' ``after_fork`` (which read ``held``): the child's process-wide state and guard are
    its own, and the inherited guards, held by the fork, are dropped."""
    _Shared.own()
    _Shared.held = []


if hasattr(os, "register_at_fork"):
    # registered after ``forks``: its after_in_child (the stores' after_fork) runs before this one's
    os.register_at_fork(before=_hold_for_fork, after_in_parent=_let_go_in_parent, after_in_child=_let_go_in_child)


class _Ear:
    """Where a waiting attempt or an observer of a name hears its wake-ups: its waker in this process's
    registry (``_Shared.wakers``: releases in this process, and wake-ups read from the process's socket of the
    name), and, while it is the socket's reader, the socket itself (releases in other processes)."""

    def __init__(self, backend: Backend, name: str, observer: bool = False) -> None:
        self.key = (backend.db_key, name)
        self.waker = rt.Waker()
        self.hub: _Hub | None = None
        self.watching = False
        self._dir = backend.wake_dir
        self._observer = observer

    def watch(self) -> None:
        """Join the wakers of the name. A waiter does it inside the transaction that queues it (under the
        database's write lock), so this process's waiters register in queue order and the queue's head is the
        earliest of its process: the one ``Wakers.wake`` wakes."""
        if not self.watching:
            self.watching = True
            _Shared.wakers.watch(self.key, self, every=self._observer)

    def unwatch(self) -> None:
        if self.watching:
            self.watching = False
            _Shared.wakers.unwatch(self.key, self)  # passes a wake-up on if we were first

    def listen(self) -> None:
        """Share (or bind, if first) this process's wake socket of the name; none if unusable."""
        if self._dir is None or self.hub is not None:
            return
        with _Shared.guard:
            hub = _Shared.hubs.get(self.key)
            if hub is None:
                sock = self._dir.listen(self.key[1])
                if sock is None:
                    return
                hub = _Shared.hubs[self.key] = _Hub(sock)
            hub.ears[self] = None
            self.hub = hub

    def notify(self) -> None:
        self.waker.notify()
        hub = self.hub
        if hub is not None and hub.reader() is self:
            hub.socket.poke()  # it waits on the socket, not on its waker

    def wait(self, delay: float) -> bool:
        """Until a wake-up or ``delay``; True if woken."""
        end = monotonic() + delay
        while True:
            left = max(0.0, end - monotonic())
            hub = self.hub
            if hub is None or hub.reader() is not self:
                if self.waker.wait(left):
                    return True
                if monotonic() >= end:
                    return False
                continue  # kicked: the reading role may have come to us
            if self.waker.take():
                return True
            if rt.wait_readable(hub.socket.sock, left) and hub.socket.drain():
                _Shared.wakers.wake(self.key)  # to this process's earliest waiter (maybe us)
            if self.waker.take():
                return True
            if monotonic() >= end:
                return False

    def close(self) -> None:
        self.unwatch()
        hub, self.hub = self.hub, None
        if hub is None:
            return
        nxt = None
        with _Shared.guard:
            was_reader = hub.reader() is self
            del hub.ears[self]
            if not hub.ears:
                del _Shared.hubs[self.key]
                hub.socket.close()
            elif was_reader:
                nxt = hub.reader()
        if nxt is not None:
            nxt.waker.kick()  # it now reads the socket (what arrived meanwhile waits there for it)


class Attempt(SyncAttempt):
    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self._backoff = Backoff()
        self._ear: _Ear | None = _Ear(backend, claim.name)
        self._listening = False

    def try_acquire(self) -> Grant:
        grant = self.backend._call(self.backend._try_acquire, self.claim, self._ear)
        if grant.acquired:
            self._unwatch()
        return grant

    def try_late(self) -> Grant:
        """No try at the deadline: a try takes the file's write lock, and a crowd of waiters timing out
        together would queue up on it past their deadlines (nothing is granted without a try here)."""
        return Grant(False)

    def wait(self, grant: Grant, timeout: float | None) -> None:
        ear = self._ear
        if ear is None:
            return
        if not self._listening:
            self._listening = True
            ear.listen()
            if not self._quiet():
                # Start listening, then look again at once: a release between our last try and now is not missed.
                return
        if ear.hub is None and not self.backend.db_key.startswith("memory:"):
            # no wake socket: other processes' releases are only seen by polling
            if ear.wait(wait_slice(grant.retry_after, self._backoff.next_delay(), timeout, LEASE_WAIT_SLICE)):
                self._backoff.reset()
            return
        # pushed (across processes by datagram, in memory by waker): the re-check interval is only a safety net
        end = None if timeout is None else monotonic() + timeout
        while True:
            quiet = self._quiet()
            left = None if end is None else end - monotonic()
            if left is not None and left <= 0:
                return
            if ear.wait(wait_slice(None if quiet else grant.retry_after, None, left, LEASE_WAIT_SLICE)):
                return
            if not quiet or not self._quiet():
                return
            # Behind an earlier fair waiter of this process, which re-checks for both of us: only keep our place.
            if not self.backend._call(self.backend._keep, self.claim):
                return  # our entry ran out: a full try queues us again

    def _quiet(self) -> bool:
        """Whether this waiter need not look at the queue until woken: a fair claim (held back by every entry
        ahead of it) with an earlier waiter of the name in this process. That one is ahead of it in the queue
        too (waiters register in queue order, ``_Ear.watch``), re-checks at every slice, and passes the wake-up
        on when it leaves; the ones behind it only keep their entries alive (``_keep``, no queue read). Reading
        the whole queue at every waiter's slice cost O(waiters) per waiter and second: the herd again."""
        ear = self._ear
        return self.claim.fair and ear is not None and ear.watching and _Shared.wakers.first(ear.key) is not ear

    def abandon(self) -> None:
        self._unwatch()
        self.backend._call(self.backend._abandon, self.claim)

    def _unwatch(self) -> None:
        if self._ear is not None:
            self._ear.close()
            self._ear = None


class _Watch(SyncWatch):
    """An observer listens where the waiters of the name do: releases, breaks, election grants and
    proclaims wake both (in this process by waker, in others by datagram); it takes every wake-up, no turn."""

    def __init__(self, backend: Backend, name: str) -> None:
        self._memory = backend.db_key.startswith("memory:")
        self._ear: _Ear | None = _Ear(backend, name, observer=True)
        self._ear.watch()
        self._ear.listen()

    def wait(self, timeout: float) -> None:
        if self._ear is None:
            return
        # in memory every change is made in this process; a file without wake sockets is polled
        pushed = self._ear.hub is not None or self._memory
        self._ear.wait(min(timeout, LEASE_WAIT_SLICE if pushed else self.POLL))

    def close(self) -> None:
        if self._ear is not None:
            self._ear.close()
            self._ear = None


class Backend(SyncBackend):
    capabilities = Capabilities(modes=frozenset(Mode), fair=True, needs_renewal=True, elections=True)
    fork_owned = True

    def __init__(
        self,
        config: StoreConfig,
        conn: sqlite3.Connection,
        guard: threading.Lock,
        db_key: str,
        busy: float = 10.0,
        shared: bool = False,
    ) -> None:
        super().__init__(config)
        self._busy = busy
        self._busy_ms = int(busy * 1000)
        self._conn: sqlite3.Connection | None = conn
        self._guard = guard
        self.db_key = db_key
        self._owns_conn = config.backend == "sqlite"
        self.in_process = not self._owns_conn
        _Shared.stores.add(self)
        self.wake_dir = WakeDir(db_key, shared) if self._owns_conn else None
        self._shared = shared
        self.clock: Callable[[], float] = time.time
        self._durable = False  # the transaction running now commits with synchronous=FULL
        self._sync_level = "NORMAL" if self._owns_conn else "OFF"
        #: who holds, recorded with each holding of a file, and the judge of a dead holder (``_reclaim``)
        self._procs = _LOCAL if self._owns_conn else None

    @classmethod
    def open(cls, config: StoreConfig) -> Backend:
        busy = config.pop_float("busy_timeout", 10.0)
        config.reject_unknown()
        if config.backend == "memory":
            conn, guard = _Shared.memory_db()
            return cls(config, conn, guard, db_key=f"memory:{os.getpid()}")
        path = Path(config.path).expanduser()
        return rt.offload(cls._open_file, config, path, busy)

    @classmethod
    def _open_file(cls, config: StoreConfig, path: Path, busy: float) -> Backend:
        # a file every user may write (the host-wide default store): its wake-up sockets are every user's too
        shared = _hostdir.world_writable(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = _connect_file(path, busy, shared)
            sql.use_wal(conn, busy)
            conn.execute("PRAGMA synchronous=NORMAL")
            sql.create_schema(conn)
        except (OSError, sqlite3.Error) as exc:
            raise BackendError(f"cannot open SQLite store {str(path)!r}: {exc}", backend=config.scheme) from exc
        return cls(config, conn, threading.Lock(), db_key=str(path.resolve()), busy=busy, shared=shared)

    def after_fork(self) -> None:
        """SQLite's rule for a forked child: never use a connection opened before the fork (its file locks and
        their bookkeeping are the parent's), open its own. The inherited one is closed if no transaction was
        open at the fork (the guard was free): POSIX file locks belong to a process, so closing it releases
        none of the parent's, and the parent's shared lock refuses the exclusive one a checkpoint on close
        would need; closing it also clears SQLite's per-file bookkeeping, which a connection of the child's
        would otherwise share. One a thread of the parent was using at the fork is left as it is
        (``forks.abandon``). memory://: the child's database is a new, empty one (``_Shared.own``)."""
        super().after_fork()
        _Shared.own()
        if not self._owns_conn:
            forks.abandon(self._conn)
            self._conn = None  # the child's in-memory database, on first use (_ready)
            self._guard = threading.Lock()
            self.db_key = f"memory:{os.getpid()}"
            return
        conn, self._conn = self._conn, None  # the child's own connection, on first use (_db)
        if self._guard.locked() and all(g is not self._guard for g in _Shared.held):  # in use at the fork
            forks.abandon(conn)
        elif conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                forks.abandon(conn)
        self._guard = threading.Lock()

    def _ready(self) -> None:
        """Before the guard is taken: a forked child's copy of a memory:// store joins the child's in-memory
        database and its guard (shared by every memory:// store of the process)."""
        if self._conn is None and not self._owns_conn:
            self._conn, self._guard = _Shared.memory_db()

    def _db(self) -> sqlite3.Connection:
        """The connection (under the guard): a forked child opens its own file connection here, on first use."""
        conn = self._conn
        if conn is None:
            conn = self._conn = _connect_file(Path(self.db_key), self._busy, self._shared)
            conn.execute(f"PRAGMA synchronous={self._sync_level}")
        return conn

    def attempt(self, claim: Claim) -> Attempt:
        return Attempt(self, claim)

    # -- plumbing --------------------------------------------------------------------------------------
    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        # Fast path: when neither our guard nor the database's write lock is taken, the whole transaction is a
        # few tens of microseconds of CPU, cheaper to run right here than to hand to a worker thread (that
        # hop made the async side 2-4x slower than the sync side). Anything that would wait goes to a thread.
        now = self._inline(fn, *args)
        if now:
            return now[0]
        # A cancelled transaction still ends (within the busy timeout) before the cancellation is raised, so
        # the clean-up that follows (abandon) runs after it, never before a grant it would then miss.
        result: T = rt.offload(self._locked, fn, *args)
        return result

    def _inline(self, fn: Callable[..., T], *args: Any) -> list[T]:
        """Run ``fn`` now if that cannot block: ``[result]``, or ``[]`` if it would have to wait."""
        self._ready()
        if not self._guard.acquire(blocking=False):
            return []
        try:
            conn = self._db()
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                return [fn(*args)]
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return []  # another process holds the write lock: wait for it in a thread
                raise BackendError(f"SQLite: {exc}", backend=self.scheme) from exc
            except sqlite3.Error as exc:
                raise BackendError(f"SQLite: {exc}", backend=self.scheme) from exc
            finally:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        finally:
            self._guard.release()

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        self._ready()
        with self._guard:
            try:
                return fn(*args)
            except sqlite3.Error as exc:
                raise BackendError(f"SQLite: {exc}", backend=self.scheme) from exc

    def _tx(self, body: Callable[[sqlite3.Connection, float], T]) -> T:
        """Run ``body(conn, now)`` in one BEGIN IMMEDIATE transaction (caller holds the guard). A body that
        hands out the first fence of a new block (``NeedsSync``) runs again with ``synchronous=FULL``: the
        level cannot change inside a transaction."""
        try:
            return self._tx_once(body)
        except sql.NeedsSync:
            pass
        self._db().execute("PRAGMA synchronous=FULL")
        self._durable = True
        try:
            return self._tx_once(body)
        finally:
            self._durable = False
            self._db().execute(f"PRAGMA synchronous={self._sync_level}")

    def _tx_once(self, body: Callable[[sqlite3.Connection, float], T]) -> T:
        conn = self._db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body(conn, self.clock())
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    def _wake(self, name: str) -> None:
        """Tell waiters that ``name`` may be free: in this process directly, in others by datagram."""
        key = (self.db_key, name)
        _Shared.wakers.wake(key)
        if self.wake_dir is not None:
            hub = _Shared.hubs.get(key)
            self.wake_dir.wake(name, skip=hub.socket.path if hub is not None else None)

    # -- operations (run under the guard, in a worker thread on the async side) ------------------------
    def _try_acquire(self, claim: Claim, ear: _Ear | None = None) -> Grant:
        def body(conn: sqlite3.Connection, now: float) -> Grant:
            sql.purge(conn, claim.name, now)
            holders = sql.holders(conn, claim.name)
            ahead = arbiter.looks_ahead(claim.mode, claim.fair, claim.permits)
            queue = sql.queue_ahead(conn, claim.name, claim.token, ahead)  # only what the rule looks at
            # Every refused claim registers (a local write), so inspect() counts the non-fair waiters too; only
            # fair claims and writers are held back by the entries ahead of them (the grant rule, ``arbiter``).
            decision = arbiter.decide(claim, holders, queue, now, register_all=True)
            if not decision.grant and not decision.ours and self._reclaim(conn, claim.name):
                holders = sql.holders(conn, claim.name)
                decision = arbiter.decide(claim, holders, queue, now, register_all=True)
            if decision.ours:  # a retry after a lost reply: already ours
                return Grant(True, fence=sql.fence_of(conn, claim.token))
            if decision.grant:
                fence = sql.next_fence(conn, self._durable)
                sql.insert_holder(conn, claim, fence, now, self._procs.own() if self._procs else None)
                sql.dequeue(conn, claim.token)
                return Grant(True, fence=fence)
            if ear is not None and ear.watching and all(q.token != claim.token for q in queue):
                ear.unwatch()  # our entry ran out and joins again at the end: so does our place here
            sql.enqueue(conn, claim, now + WAITER_TTL)
            if ear is not None:
                ear.watch()  # in queue order: see _Ear.watch
            return Grant(False, retry_after=decision.retry_after)

        grant = self._tx(body)
        if grant.acquired and claim.value is not None:
            self._wake(claim.name)  # a new leader: its observers (who listen where the waiters do) look again
        return grant

    def _reclaim(self, conn: sqlite3.Connection, name: str) -> bool:
        """Inside the acquire's transaction: delete the holdings of ``name`` whose process has provably ended
        on this host (``procs``: a ``kill -9``, a crash). The write lock is held, so of two acquirers
        that both find the same dead holder, the second finds its rows gone. True if any went."""
        if self._procs is None:
            return False
        freed = 0
        for proc in sql.holder_procs(conn, name):
            if self._procs.gone(proc):
                freed += sql.delete_of_proc(conn, name, proc)
        return freed > 0

    def _keep(self, claim: Claim) -> bool:
        """A quiet waiter's slice ended (``Attempt._quiet``): push its queue entry's deadline on."""

        def body(conn: sqlite3.Connection, now: float) -> bool:
            return sql.refresh(conn, claim.token, now, now + WAITER_TTL)

        return self._tx(body)

    def _proclaim(self, claim: Claim, value: str) -> bool:
        record = replace(claim, value=value).record

        def body(conn: sqlite3.Connection, now: float) -> bool:
            return sql.set_owner(conn, claim.token, record, now)

        ok = self._tx(body)
        if ok:
            self._wake(claim.name)
        return ok

    def _abandon(self, claim: Claim) -> None:
        def body(conn: sqlite3.Connection, now: float) -> int:
            return sql.dequeue(conn, claim.token) + sql.delete_holder(conn, claim.token)

        if self._tx(body):
            self._wake(claim.name)

    def _release(self, claim: Claim) -> bool:
        def body(conn: sqlite3.Connection, now: float) -> bool:
            expires = sql.delete_holder_returning(conn, claim.token)
            return expires is not None and expires > now

        ok = self._tx(body)
        self._wake(claim.name)
        return ok

    def _renew(self, claims: Sequence[Claim]) -> list[bool]:
        def body(conn: sqlite3.Connection, now: float) -> list[bool]:
            return [sql.extend(conn, c.token, now, c.ttl) for c in claims]

        return self._tx(body)

    def _holds(self, claim: Claim) -> bool:
        return sql.is_live(self._db(), claim.token, self.clock())

    def _inspect(self, names: Sequence[str] | None, prefix: str = "") -> list[LockInfo]:
        now = self.clock()
        conn = self._db()
        rows = sql.live_rows(conn, names, prefix, now)
        waiting = sql.waiting_counts(conn, names, prefix, now)
        return arbiter.lease_infos(rows, lambda n: waiting.get(n, 0), now)

    def _break(self, name: str) -> list[str]:
        def body(conn: sqlite3.Connection, now: float) -> list[str]:
            return sql.delete_all(conn, name)

        tokens = self._tx(body)
        self._wake(name)
        return tokens

    # -- the backend interface -------------------------------------------------------------------------
    def release(self, claim: Claim) -> bool:
        return self._call(self._release, claim)

    def renew(self, claims: Sequence[Claim]) -> list[bool]:
        return self._call(self._renew, claims)

    def holds(self, claim: Claim) -> bool:
        return self._call(self._holds, claim)

    def shorten(self, claim: Claim, ttl: float) -> bool:
        return self._call(self._shorten, claim, ttl)

    def _shorten(self, claim: Claim, ttl: float) -> bool:
        """A renewal to ``ttl`` (the row's own token, a live lease only, the host's clock) that also lets the
        process go: the holding is left to end by itself (an at-most-once job's ``at_least``), after this
        process has exited too, so no acquirer may free it early as a dead process's (``_reclaim``)."""

        def body(conn: sqlite3.Connection, now: float) -> bool:
            return sql.extend(conn, claim.token, now, ttl, disown=True)

        return self._tx(body)

    def inspect(self, name: str) -> LockInfo | None:
        found = self._call(self._inspect, [name])
        return found[0] if found else None

    def list(self, prefix: str) -> list[LockInfo]:
        return self._call(self._inspect, None, prefix)

    def proclaim(self, claim: Claim, value: str) -> bool:
        return self._call(self._proclaim, claim, value)

    def watch(self, name: str) -> SyncWatch:
        return _Watch(self, name)

    def break_lock(self, name: str) -> bool:
        tokens = self._call(self._break, name)
        for token in tokens:
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

    def close(self) -> None:
        if self._owns_conn:
            rt.offload(self._locked, self._close_conn)

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
