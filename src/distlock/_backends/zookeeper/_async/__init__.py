"""``zookeeper://h1:2181,h2:2181[/chroot]`` (alias ``zk://``): Curator-compatible locks on a ZooKeeper ensemble.

One kazoo client (one ZooKeeper session) per store. Every lock kind is an ephemeral sequential child under the
lock's path, named and ordered exactly as Apache Curator does (see ``layout.py`` in the folder above), so a Curator
``InterProcessMutex`` / ``InterProcessReadWriteLock`` / ``InterProcessSemaphoreV2`` on the same path and a
distlock lock exclude each other. The queue is FIFO by construction (``always_fair``). An election is Curator's
``LeaderLatch`` on the same path: candidates are ``latch-`` children whose data is the value (the participant
id), the first leads, the term is its czxid, ``proclaim`` sets its data, and an observer watches the children
and the leader's data (``watch.py``); a LeaderLatch and a distlock candidate queue up together.

Liveness is the session, not a per-lock lease (``needs_renewal=False``): the session timeout is what ``ttl`` is
on the other backends, and ``lease_end`` is judged from the last answer of the server. ``lost_on=suspended``
(Curator's standard policy) also reports loss as soon as kazoo suspends the connection. A holder also watches
its own child, so a child deleted by an admin (``break_lock`` from anywhere) is reported lost too, and a
release request written into the child's data (``request_release``, or Curator's ``Revoker``) is told. Every wait
for an answer is bounded (``operation_timeout``; an acquire's later tries by its deadline; the clean-up after
a failed acquire by its own budget, what it leaves goes with the session). Callbacks on kazoo's threads only
record or signal.

Fence: the creation zxid (``czxid``) of the holder's child. zxids only grow across the whole ensemble, so the
fence keeps growing even if the lock's parent node is deleted and re-created (the sequence counter restarts).
Parents (the root and every lock path) are container nodes where the server supports them (3.5+): the server
deletes them once they are empty. With ``user:password@`` in the URL the client authenticates with the
``digest`` scheme and every node it creates gets an ACL granting everything to that identity only.

The folder, from the lock down to the wire, is mapped in ``distlock/_backends/zookeeper/__init__.py``.

This module's ``Backend`` only composes them and answers the backend contract (``_async/backend.py``); each
blocking operation runs in a worker thread (``rt.offload``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from .... import _rt_async as rt
from ...._async.backend import AsyncBackend, AsyncNativeDoubleBarrier, AsyncWatch
from ...._async.batch import Batched
from ...._core import forks
from ...._core.latch import LatchState
from ...._core.timing import monotonic
from ...._core.types import Capabilities, Claim, LockInfo, Mode, PrimitiveInfo, primitive_infos
from ...._errors import BackendError, LockError
from ...._given import given
from ...._url import StoreConfig
from .. import connect, layout, records
from ..admin import Admin
from ..barrier import Barriers
from ..cleanup import Cleanup
from ..holdings import Holdings
from ..latch import Latches, latch_path
from ..nodes import Nodes
from ..semaphore import Semaphores
from ..session import Session
from ..wire import Wire
from .dbarrier import DoubleBarriers
from .recipe import Attempt
from .watch import LatchWatch, Watch

__all__ = ["Attempt", "Backend"]

T = TypeVar("T")
log = logging.getLogger("distlock")


class Wakes(Protocol):
    """What looks again on any change of the connection: a waiting attempt, an observer's watch."""

    def wake(self, event: Any = None) -> None: ...


class _Abandons(Batched[str, Attempt, None]):
    """The clean-ups of a store's attempts that give up together (a thousand waiters timing out at once):
    what they left goes in one multi request for all that came while the last one ran
    (``Cleanup.abandon_all``), not a delete each."""

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self._backend = backend

    async def run(self, items: list[tuple[str, Attempt]]) -> dict[str, None]:
        await rt.offload(self._run, [attempt for _, attempt in items])
        return dict.fromkeys((token for token, _ in items), None)

    def _run(self, attempts: list[Attempt]) -> None:
        b = self._backend
        # The clean-up has its own budget; what it cannot delete in time is deleted once the server answers
        # again, or goes with the session (its nodes are ephemeral). Each attempt's step (a try cancelled in
        # flight) ends before its nodes are looked at.
        end = monotonic() + b.cleanup.budget
        with contextlib.ExitStack() as steps, b.wire.bounded(end, None):
            ready = []
            for attempt in attempts:
                if attempt.step_mutex.acquire(timeout=max(0.0, end - monotonic())):
                    steps.callback(attempt.step_mutex.release)
                    ready.append(attempt.traces)
                else:  # still in a step at the end of the budget: left to the background clean-up
                    b.cleanup.put_off(attempt.traces.leftovers())
            b.wire.translated(lambda: b.cleanup.abandon_all(ready))


class Backend(AsyncBackend):
    capabilities = Capabilities(
        modes=frozenset(Mode), fair=True, always_fair=True, needs_renewal=False, elections=True, downgrade=True
    )
    fork_owned = True

    def __init__(self, config: StoreConfig, link: connect.Link, opts: connect.Options) -> None:
        super().__init__(config)
        self.root = opts.root
        self._opts = opts
        self._mutex = threading.Lock()
        #: connection changes seen so far (``changed``, from kazoo's listener: a drop is counted before its
        #: connection thread connects again, so before anything sent on the next connection is answered)
        self.epoch = 0
        self._waiting: set[Wakes] = set()  # attempts and watches that look again on any change of the connection
        #: a forked child's copy: the session is the parent's, and the child's own is opened on first use
        self._inherited = False
        self._opening = threading.Lock()
        self._compose(link)

    def _compose(self, link: connect.Link) -> None:
        """The parts, from the wire up, on one kazoo client's session."""
        self.wire = Wire(link.client, self.config, self._opts.op_timeout, link.started)
        self.nodes = Nodes(self.wire, link.acl)
        self.holdings = Holdings(self.wire, self.nodes, self.lost, self.revoked)
        self.cleanup = Cleanup(self.nodes, self.holdings, self._opts.op_timeout)
        self.semaphores = Semaphores(self.wire, self.nodes, link.acl, self.cleanup.put_off)
        self.abandons = _Abandons(self)
        self.admin = Admin(self.wire, self.nodes, self.holdings, self.root, lambda: self.epoch)
        self.latches = Latches(self.wire, self.nodes, self.root)
        self.barriers = Barriers(self.wire, self.nodes, self.root)
        opts = self._opts
        self.session = Session(
            self.wire,
            self,
            link.session_timeout,
            link.session_log,
            opts.suspend_grace,
            opts.lost_on,
            link.owned,
            link.started,
        )
        self.session.start()

    def name_refused(self, name: str) -> str | None:
        return layout.name_refused(name, self.root)

    def after_fork(self) -> None:
        """kazoo's connection thread, its event threads and this store's liveness thread are not in a forked
        child, and its socket and session are the parent's: requests from the child would wait for ever, or
        go on the parent's socket. The session holds the parent's ephemeral nodes, its locks: the child never
        closes it (that would delete them) and never sends on it. Everything built on it is forgotten (never
        stopped or closed); the child opens a session of its own on first use (``_own_session``)."""
        super().after_fork()
        forks.abandon(self.wire, self.session, self.holdings, self.cleanup)
        self._mutex = threading.Lock()
        self._waiting = set()
        self._opening = threading.Lock()
        self._inherited = True

    def _own_session(self) -> None:
        """Blocking: a forked child's new kazoo client and session, and the parts on it (once)."""
        with self._opening:
            if not self._inherited:
                return
            if not self.session.owned:
                raise BackendError(
                    "this store uses the session of the KazooClient given to connect(client=...), which a forked "
                    "child cannot use (kazoo's connection thread is the parent's): connect anew in the child",
                    backend=self.scheme,
                )
            self._compose(connect.start(self.config, self._opts))
            self._inherited = False

    async def ready(self) -> None:
        """Before any request: in a forked child, its own session first."""
        if self._inherited:
            await rt.offload(self._own_session)

    @classmethod
    async def open(cls, config: StoreConfig) -> Backend:
        client = given(config)
        opts = connect.options(config, client)
        if client is not None:
            link = await rt.offload(connect.adopt, config, client, opts)
        else:
            link = await rt.offload(connect.start, config, opts)
        return cls(config, link, opts)

    @property
    def suspend_grace(self) -> float | None:
        """The ``suspend_grace`` option: an extra limit on how long the connection may stay down (kazoo's
        SUSPENDED) before holders are told lost; None (the default): the session's own end decides."""
        return self.session.suspend_grace

    @property
    def granted_timeout(self) -> float:
        """The session timeout the server granted (it may clamp the requested one), in seconds."""
        return self.session.granted_timeout

    def lease_end(self, claim: Claim) -> float | None:
        """When the session may have expired on the server (``Session.lease_end``): the same for every claim."""
        return self.session.lease_end()

    def lease_span(self, claim: Claim) -> float | None:
        return self.granted_timeout

    # -- attempts waiting for a change of the connection -----------------------------------------------
    def watch_session(self, attempt: Wakes) -> None:
        with self._mutex:
            self._waiting.add(attempt)

    def unwatch_session(self, attempt: Wakes) -> None:
        with self._mutex:
            self._waiting.discard(attempt)

    def waiting(self) -> int:
        """How many attempts and watches of this store wait (for the recipe's wait slice)."""
        with self._mutex:
            return len(self._waiting)

    # -- the session's events (SessionEvents; kazoo's threads or the liveness thread) --------------------
    def lose_all(self, reason: str) -> list[str]:
        return [held.path for held in self.holdings.lose_all(reason)]

    def holding(self) -> bool:
        return self.holdings.holding()

    def replaced(self) -> None:
        self.cleanup.clear()

    def reconnected(self) -> None:
        self.holdings.drop_stale()
        self.cleanup.start()

    def answering_again(self) -> None:
        self.cleanup.start()

    def changed(self) -> None:
        # a waiter's watches may be gone with a connection change (kazoo sets none again on a new connection):
        # a waiter compares this epoch with the one its watch on its own child was set in
        self.epoch += 1
        with self._mutex:
            waiting = list(self._waiting)
        for attempt in waiting:
            attempt.wake()

    # -- the backend interface -------------------------------------------------------------------------
    async def _call(self, fn: Callable[[], T], name: str | None = None) -> T:
        """``fn()`` (which looks up the parts when it runs: a forked child's are new) in a worker thread."""
        await self.ready()
        result: T = await rt.offload(lambda: self.wire.translated(fn, name))
        return result

    def attempt(self, claim: Claim) -> Attempt:
        return Attempt(self, claim)

    async def release(self, claim: Claim) -> bool:
        if claim.mode is not Mode.SEMAPHORE:
            return await self._call(lambda: self.holdings.release(claim.token))
        released = await self._call(lambda: self.holdings.release(claim.token))
        await self.sweep(claim.name)  # the last one gone takes the stored capacity with it
        return released

    async def sweep(self, name: str) -> None:
        """Remove the stored capacity of the semaphore ``name`` if nobody holds or waits (``Semaphores.sweep``).
        Best effort: what a failure leaves is removed by the next user's release or abandon, or counts as a
        leftover for the next first user (``semaphore.State.stored``)."""
        path = layout.lock_path(name, self.root)
        try:
            await self._call(lambda: self.semaphores.sweep(path), name=name)
        except LockError as exc:
            log.warning("could not remove the stored capacity of the free semaphore %r: %s", name, exc)

    async def set_permits(self, name: str, permits: int) -> bool:
        path = layout.lock_path(name, self.root)
        return await self._call(lambda: self.semaphores.resize(path, permits), name=name)

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        return await self._call(lambda: self.holdings.still_held([c.token for c in claims]))

    async def holds(self, claim: Claim) -> bool:
        return await self._call(lambda: self.holdings.holds(claim.token))

    async def inspect(self, name: str) -> LockInfo | None:
        return await self._call(lambda: self.admin.inspect(name), name=name)

    async def proclaim(self, claim: Claim, value: str) -> bool:
        data = records.latch_data(value)
        return await self._call(lambda: self.holdings.proclaim(claim.token, data), name=claim.name)

    async def watch(self, name: str) -> AsyncWatch:
        await self.ready()
        watch = Watch(self, layout.lock_path(name, self.root))
        await watch.arm()
        return watch

    async def list(self, prefix: str) -> list[LockInfo]:
        return await self._call(lambda: self.admin.list_locks(prefix))

    async def break_lock(self, name: str) -> bool:
        return bool(await self._call(lambda: self.admin.break_lock(name), name=name))

    async def list_primitives(self, prefix: str) -> Sequence[PrimitiveInfo] | None:
        latches = await self._call(self.latches.listing)
        return primitive_infos(latches, await self._call(self.barriers.listing), prefix)

    def latch_refused(self) -> str | None:
        return None

    async def latch_open(self, name: str, count: int | None, round_id: str) -> LatchState | None:
        return await self._call(lambda: self.latches.open(name, count, round_id), name=name)

    async def latch_count_down(self, name: str, round_id: str, step: str, linger: float) -> int:
        return await self._call(lambda: self.latches.count_down(name, round_id, step, linger), name=name)

    async def latch_watch(self, name: str) -> AsyncWatch:
        await self.ready()
        watch = LatchWatch(self, latch_path(name, self.root))
        await watch.arm()
        return watch

    def barrier_refused(self, kind: str) -> str | None:
        return None

    def double_barrier_native(self) -> AsyncNativeDoubleBarrier | None:
        return DoubleBarriers(self)

    async def barrier_read(self, kind: str, name: str) -> tuple[bytes | str | None, object]:
        return await self._call(lambda: self.barriers.read(kind, name), name=name)

    async def barrier_cas(self, kind: str, name: str, version: object, data: str | None, keep_ms: int) -> bool:
        return await self._call(lambda: self.barriers.cas(kind, name, version, data), name=name)

    async def request_release(self, name: str, reason: str) -> bool:
        return await self._call(lambda: self.admin.request_release(name, reason), name=name)

    async def aclose(self) -> None:
        if self._inherited:  # a forked child that opened no session: the one there is the parent's
            return
        self.session.stop()
        self.holdings.close()
        await rt.offload(self.session.release_client)
