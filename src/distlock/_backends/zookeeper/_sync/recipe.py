# GENERATED from src/distlock/_backends/zookeeper/_async/recipe.py by scripts/gen_sync.py: edit that file, not this one.
"""The lock recipe: one acquire attempt, laid out exactly as Apache Curator lays out its locks.

Curator's layering is the model: ``InterProcessMutex`` (reentrancy: the store's lock objects) ->
``LockInternals`` (this module: create our child, list the queue, hold or watch) ->
``StandardLockInternalsDriver`` (the pure rule ``layout.verdict``: acquired, or the ONE child to watch).

One try (``try_acquire``): create our child once (protected name, ``nodes.py``), list the children, and
either hold the lock or set a watch on the one child whose deletion may let us in (no herd, F11 in
docs/safety.md); the waiter next in line also watches its own child, so the deletion event of the child
ahead lets it hold with no request (``_step_locked`` says why that is safe). A watch, a session event or a
``MAX_WAIT_SLICE`` tick wakes a waiter, which first checks
that its own child is still there (F6) and whether the watched child is, in one round trip: only if the
watched child is gone does it list the children again (Curator lists at every wake-up). A session event
wakes every waiter of the store, and the slice ticks every waiter: with a thousand waiters, listings of a
thousand children each, several hundred a second; the check is two small reads, and the slice grows with
the store's number of waiters (``MAX_RECHECKS``), so the ticks of a long line stay a few a second. The listing after a real
wake-up stays (a deleted predecessor may have been a waiter that gave up, so only the queue tells). Mutex, read and write locks differ only
in the mark of the child and the order rule; an election candidate is a mutex child marked ``latch-``
whose data is its value (Curator's ``LeaderLatch``: the first child leads, each watches its predecessor).
The semaphore is Curator's ``InterProcessSemaphoreV2``: take the internal mutex at ``<path>/locks``, then, once
``want`` more leases fit in the stored capacity, create them at ``<path>/leases`` in one multi request
(``semaphore.py``), and release the internal mutex at once. ``abandon`` deletes whatever the attempt created, even a grant whose reply never reached the caller
(F10; ``cleanup.py``).

kazoo is threaded: each blocking step runs in a worker thread (``rt.offload``) and watches wake the
waiting task through ``rt.Waker`` (thread-safe). A worker thread cannot be stopped from outside, so a
cancelled step is told through its abort flag and stops at its next wait (``Wire.bounded``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from kazoo.exceptions import SessionExpiredError
from kazoo.protocol.states import EventType, WatchedEvent

from .... import _rt_sync as rt
from ...._sync.backend import SyncAttempt
from ...._core import arbiter
from ...._core.timing import monotonic
from ...._core.types import Claim, Grant, Mode
from ...._errors import BackendError
from .. import layout, records
from ..cleanup import Traces
from ..handler import on_event_thread
from ..holdings import Held
from ..nodes import Entry
from ..wire import Stop

if TYPE_CHECKING:
    from . import Backend

#: a waiter re-checks at least this often even without a wake-up (watches are the real mechanism)
MAX_WAIT_SLICE = 5.0
#: ... but a store's waiters together re-check no more often than this per second: with a thousand waiters,
#: a 5 s slice each would be 200 re-checks a second, more than the hand-offs; their slice grows instead
MAX_RECHECKS = 20.0
#: passes of one attempt step before giving up (each pass follows a change of the queue)
MAX_PASSES = 200


class Attempt(SyncAttempt):
    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self.path = layout.lock_path(claim.name, backend.root)
        self._semaphore = claim.mode is Mode.SEMAPHORE
        # The semaphore first takes Curator's internal mutex at <path>/locks, then a lease at <path>/leases.
        queue = f"{self.path}/{layout.SEM_LOCKS}" if self._semaphore else self.path
        mark = layout.MUTEX_MARK if self._semaphore else layout.mark_of(claim.mode, claim.value)
        self._order = Mode.EXCLUSIVE if self._semaphore else claim.mode
        # a downgrade: the child of this owner's write holding, which lets our read in at once (``read_verdict``)
        own = None if claim.companion is None else backend.holdings.path_of(claim.companion)
        self._own_writer = None if own is None else own.rsplit("/", 1)[1]
        # An election candidate is a LeaderLatch node: it holds the value alone (what Curator's peers read as
        # the participant id), so the owner record has no place on it.
        if claim.value is not None:
            self._data = records.latch_data(claim.value)
        else:
            # a semaphore's nodes (its internal-mutex node, its leases) carry the permits it wants (inspect)
            self._data = records.node_data(claim.owner, claim.mode, claim.want)
        leases = f"{self.path}/{layout.SEM_LEASES}"
        self._traces = Traces(
            claim.token,
            claim.name,
            node=Entry(queue, mark),
            # only a semaphore ever creates a lease: no UUID drawn for it otherwise (about 4 us an acquire)
            lease=Entry(leases, layout.LEASE_MARK) if self._semaphore else Entry(leases, layout.LEASE_MARK, uid=""),
        )
        self._watching: str | None = None  # the child we watch, once we wait
        # the watched child was the only one in our way at the listing we decided on: once it is gone, we hold
        self._alone = False
        # kazoo's event thread saw the watched child deleted (the watch fired for it, not a session event)
        self._gone: str | None = None
        # our own child is watched too while we wait: (its path, the store's connection epoch when the watch
        # was set), and the path of an own child whose deletion that watch told (see _step_locked)
        self._own_watch: tuple[str, int] | None = None
        self._own_gone: str | None = None
        self._step_mutex = threading.Lock()  # one blocking step at a time: abandon waits for a running try
        self._waker: rt.Waker | None = None
        self._deadline: float | None = None  # the acquire's deadline, learned from wait()
        self._abort = threading.Event()  # asyncio: the task waiting for the step was cancelled
        self._woken = True  # the last wait was woken (or there was none yet)

    # -- the async interface ---------------------------------------------------------------------------
    def try_acquire(self) -> Grant:
        self.backend.ready()
        if self._waker is None:
            self._waker = rt.Waker()
            self.backend.watch_session(self)
        # A cancellation raises the step's abort flag: the step stops at its next wait (within ABORT_SLICE),
        # and the abandon that follows runs after it, so it deletes the child the step created (never before).
        grant: Grant = rt.offload(self._step, interrupt=self._abort.set)
        if grant.acquired:
            self.backend.unwatch_session(self)
        return grant

    def wait(self, grant: Grant, timeout: float | None) -> None:
        assert self._waker is not None
        # the store passes what is left of the acquire's timeout: the next steps wait no longer than that
        self._deadline = None if timeout is None else monotonic() + timeout
        slice_ = max(MAX_WAIT_SLICE, self.backend.waiting() / MAX_RECHECKS)
        self._woken = self._waker.wait(slice_ if timeout is None else min(timeout, slice_))

    def try_late(self) -> Grant:
        """At the deadline: look again only if the last wait was woken (a watched child deleted, a children
        change, a session event); otherwise nothing changed since the last look and the answer would be "not
        yet" (a thousand waiters timing out together looked once each, past their deadlines)."""
        if not self._woken:
            return Grant(False)
        return self.try_acquire()

    def abandon(self) -> None:
        b = self.backend
        b.unwatch_session(self)
        try:
            # the store's attempts that give up together clean up together (``Backend.abandons``)
            b.abandons(self.claim.token, self, monotonic() + b.cleanup.budget)
        except TimeoutError:  # no turn within the clean-up's budget: deleted in the background instead
            b.cleanup.put_off(self._traces.leftovers())
            return
        if self._semaphore:  # the last one gone (holder or waiter) takes the stored capacity with it
            b.sweep(self.claim.name)

    # -- called from kazoo's threads -------------------------------------------------------------------
    @on_event_thread
    def wake(self, event: WatchedEvent | None = None) -> None:
        if event is not None and event.type == EventType.DELETED:
            self._gone = event.path
        if self._waker is not None:
            self._waker.notify()

    @on_event_thread
    def own_deleted(self, event: WatchedEvent) -> None:
        """The watch on our own child: its deletion (an admin, ``break_lock``, or our own release) is recorded
        before any later event of the session is read. An attempt still waiting looks again at once (a granted
        one is woken by nothing: its holding's own watch tells a deletion)."""
        if event.type == EventType.DELETED:
            self._own_gone = event.path
            if self._traces.granted is None:
                self.wake()

    # -- blocking steps --------------------------------------------------------------------------------
    def _step(self) -> Grant:
        wire = self.backend.wire
        with self._step_mutex, wire.bounded(self._deadline, self._abort):
            try:
                return wire.translated(self._step_or_requeue, self.claim.name)
            except Stop as stop:
                if stop.why == Stop.DEADLINE:  # the store sees the deadline passed and abandons the attempt
                    return Grant(False)
                raise

    def _step_or_requeue(self) -> Grant:
        try:
            return self._step_locked()
        except SessionExpiredError:
            # kazoo is opening a new session; our children died with the old one. Queue again once it is
            # up (the session listener wakes this attempt).
            self._traces.node.renew()
            self._traces.lease.reset()
            return Grant(False, retry_after=0.2)

    def _step_locked(self) -> Grant:
        nodes = self.backend.nodes
        node = self._traces.node
        for _ in range(MAX_PASSES):
            watching, self._watching = self._watching, None
            alone, self._alone = self._alone, False
            verdict: layout.Verdict | None = None
            ordered: list[str] = []
            gone, self._gone = self._gone, None
            if node.name is None:  # queue up and look at the queue in one round trip
                children = nodes.create_and_list(node, self._data)
            else:
                if watching is not None and gone == f"{node.parent}/{watching}":
                    # The watched child's deletion event came: it is gone, no need to look at it again.
                    if not alone:
                        # Others were ahead of us at our listing: the listing below tells both what is ahead
                        # now and whether our own child is still there (F6), one round trip less per hand-off.
                        pass
                    elif self._own_watch == (node.path, self.backend.epoch) and self._own_gone != node.path:
                        # It was the only one in our way (see below), and our own child is still there with no
                        # request: its watch was set before the one that fired, and ZooKeeper tells a session's
                        # events in the order it applied them (read and recorded by kazoo's one connection
                        # thread), so its deletion would have been told first. No connection change since the
                        # watch was set (one could have dropped it): then the request below asks instead.
                        # docs/models/zookeeper_own_watch.pml checks this rule.
                        verdict = layout.Verdict(True)
                    elif nodes.exists(node.path):  # it was the only one in our way (see below): we hold
                        verdict = layout.Verdict(True)
                    else:  # our child vanished (session expired, admin): queue again, fresh name
                        node.renew()
                        continue
                elif watching is not None:  # woken: list the queue only if the watched child is gone
                    # Next in line, our own child is watched again too: a connection change (what most often
                    # wakes us here) took both watches with it, and this sets them on the connection up now.
                    ours, there = self._look(node, f"{node.parent}/{watching}", alone)
                    if not ours:  # our child vanished (session expired, admin): queue again, fresh name
                        node.renew()
                        continue
                    if there:
                        self._watching, self._alone = watching, alone
                        return Grant(False)
                    if alone:
                        # Nothing can have come ahead of our child since that listing (a new child gets a
                        # higher sequence, and names are never reused), and the one child that stood in our
                        # way is gone: the listing would say we hold. With a thousand waiters, this skips a
                        # listing of a thousand children at each hand-off (Curator lists again).
                        verdict = layout.Verdict(True)
                if verdict is None:
                    children = nodes.children(node.parent)
            name = node.name
            assert name is not None
            if verdict is None:
                try:
                    ordered = layout.queue(children)
                    verdict = layout.verdict(self._order, ordered, name, self._own_writer)
                except layout.NodeGone:  # our child vanished (session expired, admin): queue again, fresh name
                    node.renew()
                    continue
            if not verdict.acquired:
                assert verdict.watch is not None
                ahead = f"{node.parent}/{verdict.watch}"
                alone = layout.blocks_alone(self._order, ordered, name, verdict.watch)
                if alone:  # next in line: watch our own child too, so its turn needs no request (above)
                    ours, there = self._look(node, ahead, alone)
                    if not ours:  # our child vanished (session expired, admin): queue again, fresh name
                        node.renew()
                        continue
                else:
                    there = nodes.watch_exists(ahead, self.wake)
                if there:
                    self._watching, self._alone = verdict.watch, alone
                    return Grant(False)
                continue  # the child to watch is already gone: look again
            if not self._semaphore:
                return self._grant(node.path, node.czxid)
            grant = self._lease_step()
            if grant is not None:
                return grant
        raise BackendError(
            f"the queue of {self.claim.name!r} kept changing; giving up this attempt", backend=self.backend.scheme
        )

    def _look(self, node: Entry, ahead: str, alone: bool) -> tuple[bool, bool]:
        """Whether our own child and the child ``ahead`` are there, in one round trip (``Nodes.recheck``),
        watching ``ahead``. Next in line (``alone``) our own child is watched too, and once ``ahead`` is found
        there that watch is recorded with the connection epoch read before the requests went out (a change
        while they do counts), which the next-in-line rule compares."""
        epoch = self.backend.epoch
        own_watch = self.own_deleted if alone else None
        ours, there = self.backend.nodes.recheck(node.path, ahead, self.wake, own_watch)
        if ours and there and alone:
            self._own_watch = (node.path, epoch)
        return ours, there

    def _lease_step(self) -> Grant | None:
        """Semaphore, holding the internal mutex: once ``want`` more leases fit in the capacity, create them
        all in one multi request (``semaphore.py``); until then keep the mutex and wait for a lease to go or
        the capacity to change (Curator's holder of the mutex waits the same way, its one lease made)."""
        sems = self.backend.semaphores
        lease = self._traces.lease
        fence = sems.find(lease) if lease.created and lease.name is None else None  # a lost reply's multi
        if fence is None:
            state = sems.state(self.path, watch=self.wake)
            stored = state.stored(self._traces.node.czxid)
            terms = arbiter.terms(self.claim, stored)  # ConfigError: it does not fit what is stored
            if len(state.leases) + self.claim.want > terms.capacity:
                return Grant(False)
            fence = sems.take(self.path, lease, self.claim.want, self._data, state, terms, stored is None)
            if fence is None:  # the capacity changed since the read: read again
                return None
        node = self._traces.node
        self.backend.nodes.delete(node.path)  # Curator releases the internal mutex once leased
        node.reset()
        return self._grant(lease.path, fence, lease.paths[1:])

    def _grant(self, path: str, czxid: int, others: list[str] | None = None) -> Grant:
        self._traces.granted = path
        held = Held(self.claim.token, path, companion=self.claim.companion, keeps=list(others or ()))
        self.backend.holdings.hold(held)
        return Grant(True, fence=czxid)

    @property
    def traces(self) -> Traces:
        return self._traces

    @property
    def step_mutex(self) -> threading.Lock:
        """Held while a blocking step of this attempt runs: its clean-up waits for it (``Backend.abandons``)."""
        return self._step_mutex
