"""What this store holds: one node per holding, and everything that can take it away.

A holding is the node that grants the lock (a mutex/read/write child, or a semaphore lease), registered by
its claim's token. It is reported lost (``AsyncBackend.lost``, once) when the node is deleted by anyone
else (a watch on it, armed by the store's sweeper thread in batches, at most ``WATCH_AFTER`` after the grant:
a hold shorter than the wait for the next sweep never pays the request),
when the session is gone or may be (``lose_all``, from the session's events) or when an admin broke it.
The same watch tells a release request (``records.revoke_reason``: ours, or Curator's ``__REVOKE__``): each
change of the node's data re-arms it with a read of the data, and a request found there is told
(``AsyncBackend.revoked``) with the node's version as its identity. A request made before the watch is armed
is read by the arming read itself, so a holding hears of a request at most ``WATCH_AFTER`` after its grant.
``release`` / ``holds`` / ``still_held`` are the backend operations on a holding.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import monotonic
from typing import Any

from kazoo.exceptions import KazooException, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType, WatchedEvent

from ..._core import forks
from ..._errors import LockError
from . import layout, records
from .nodes import Nodes
from .wire import Wire

log = logging.getLogger("distlock")

#: a holding gets its deletion watch at the first sweep after its grant, due this long after the first holding
#: that found no sweep pending (most short holds never pay the extra request)
WATCH_AFTER = 0.2


@dataclass(eq=False)
class Held:
    token: str  # the claim's
    path: str  # the znode that is the holding (mutex/read/write child, or the semaphore lease)
    lost: bool = False
    #: a read taken by the write holder of its name (a downgrade): the write holding's token
    companion: str | None = None
    #: nodes whose deletion waits for this holding's release: a downgraded write's node, kept in its place in
    #: the queue so that no writer queued behind it gets in while this read holds (``release``)
    keeps: list[str] = field(default_factory=list)
    #: an election leader's node: the data version its own ``proclaim`` last got back (a later one it did not
    #: write is a release request), proclaims in flight, and the highest version its watch read
    version: int = 0
    proclaiming: int = 0
    read_version: int = 0


class Holdings:
    """The holdings of one store, by token. Thread-safe; kazoo's callbacks only record or signal."""

    def __init__(
        self,
        wire: Wire,
        nodes: Nodes,
        on_lost: Callable[[str, str], None],
        on_revoke: Callable[[str, str, str], None] | None = None,
    ) -> None:
        self._wire = wire
        self._nodes = nodes
        self._on_lost = on_lost
        self._on_revoke = on_revoke
        self._mutex = threading.Lock()  # the sweeper's condition's too
        self._swept = threading.Condition(self._mutex)
        self._held: dict[str, Held] = {}
        self._unwatched: list[Held] = []
        #: when the pending sweep is due (None: none pending); the sweeper thread, started by the first holding
        self._sweep_at: float | None = None
        self._sweeper: threading.Thread | None = None
        #: when the sweeper wakes next by itself (the end of its wait; +inf: not before a notify), under _mutex
        self._wakes_at = math.inf
        self._closing = False
        forks.track(self)

    def after_fork(self) -> None:
        """A forked child has no sweeper thread (the parent's may have held the mutex at the fork) and arms
        nothing for the parent's holdings: the backend composes the child's own parts on its own session."""
        self._mutex = threading.Lock()
        self._swept = threading.Condition(self._mutex)
        self._unwatched = []
        self._sweep_at = None
        self._sweeper = None
        self._wakes_at = math.inf

    def hold(self, held: Held) -> None:
        # On the grant path: a list append and, at most, a notify of the sweeper (none while it is waiting
        # anyway for a time before the sweep is due); no thread started past the store's first holding.
        with self._mutex:
            self._held[held.token] = held
            self._unwatched.append(held)
            if self._sweep_at is not None or self._closing:
                return
            due = self._sweep_at = monotonic() + WATCH_AFTER
            if self._sweeper is None:
                self._sweeper = threading.Thread(target=self._sweeping, name="distlock-zk-sweeper", daemon=True)
                self._sweeper.start()
            elif due < self._wakes_at:
                self._swept.notify()

    def unhold(self, token: str) -> Held | None:
        with self._mutex:
            return self._held.pop(token, None)

    def close(self) -> None:
        """The store closes: no more watches are armed, the sweeper ends."""
        with self._mutex:
            self._closing = True
            self._unwatched = []
            self._sweep_at = None
            self._swept.notify()

    def _sweeping(self) -> None:
        """The sweeper thread: arm the deletion watch of every holding still held, batched (one sweep per
        ``WATCH_AFTER``, due that long after the first holding that found none pending). Once a sweep is done
        it waits one more ``WATCH_AFTER`` by itself before it waits for a notify: a holding granted meanwhile
        is due after that, so a lock taken again and again never has to wake it."""
        with self._swept:
            idle = False
            while not self._closing:
                now = monotonic()
                due = self._sweep_at
                if due is None:
                    self._wakes_at = math.inf if idle else now + WATCH_AFTER
                    idle = True
                elif due > now:
                    self._wakes_at = due
                else:
                    batch, self._unwatched, self._sweep_at = self._unwatched, [], None
                    batch = [h for h in batch if self._held.get(h.token) is h]
                    self._mutex.release()
                    try:
                        for held in batch:
                            if self._closing:
                                break
                            try:
                                self._arm_watch(held)
                            except Exception:  # the one thread that arms them all must go on
                                log.exception("ZooKeeper: arming a holding's deletion watch failed")
                    finally:
                        self._mutex.acquire()
                    idle = False
                    continue
                self._swept.wait(None if self._wakes_at == math.inf else self._wakes_at - now)
            self._sweeper = None

    def _arm_watch(self, held: Held) -> None:
        """Watch our own holding node (no wait for the reply): its deletion by anyone else means lost."""
        w = self._wire

        def on_event(event: WatchedEvent) -> None:
            if self._held.get(held.token) is not held or held.lost:
                return
            if event.type == EventType.DELETED:
                self._lose(held, "the lock node was deleted (break_lock or an administrator)")
            elif not self._closing:  # data change, or the watch was dropped by a disconnection: re-arm
                self._arm_watch(held)

        def on_reply(result: Any) -> None:
            w.on_reply(result)
            try:
                data, stat = result.get_nowait()
            except NoNodeError:
                if self._held.get(held.token) is held:
                    self._lose(held, "the lock node is gone")
                return
            except Exception:  # noqa: BLE001 - connection trouble: the session events cover it
                return
            if self._held.get(held.token) is held and not held.lost:
                self._read(held, data, int(stat.version))

        try:
            w.send(w.client.get_async, held.path, watch=on_event).rawlink(on_reply)
        except KazooException:
            pass

    # -- release requests ------------------------------------------------------------------------------
    def _read(self, held: Held, data: bytes | None, version: int) -> None:
        """The holding's node as its watch read it: a release request in it is told."""
        if not layout.is_latch(held.path.rpartition("/")[2]):  # the node's own name (a lock name may hold "latch-")
            reason = records.revoke_reason(data)
            if reason is not None:
                self._revoked(held, version, reason)
            return
        # an election leader's node holds its value alone: a version its own proclaim did not write is a request
        with self._mutex:
            held.read_version = max(held.read_version, version)
            asked = held.proclaiming == 0 and version > held.version
        if asked:
            self._revoked(held, version, "")

    def _revoked(self, held: Held, version: int, reason: str) -> None:
        if self._on_revoke is not None:
            self._on_revoke(held.token, f"v{version}", reason)

    # -- loss ------------------------------------------------------------------------------------------
    def _lose(self, held: Held, reason: str) -> None:
        if held.lost:
            return
        held.lost = True
        self._on_lost(held.token, reason)

    def lose_all(self, reason: str) -> list[Held]:
        """Report every holding lost; the ones not lost before."""
        with self._mutex:
            holdings = [h for h in self._held.values() if not h.lost]
        for held in holdings:
            self._lose(held, reason)
        return holdings

    def lose_paths(self, paths: Sequence[str], reason: str) -> None:
        """Our holdings among the deleted ``paths`` are lost (an admin's ``break_lock`` through this store)."""
        with self._mutex:
            ours = [h for h in self._held.values() if h.path in paths]
        for h in ours:
            self._lose(h, reason)

    def holding(self) -> bool:
        """Is something held and not yet reported lost?"""
        with self._mutex:
            return any(not h.lost for h in self._held.values())

    def drop_stale(self) -> None:
        """After a reconnect: delete nodes of holdings already reported lost (the session survived)."""
        w = self._wire
        with self._mutex:
            stale = [h for h in self._held.values() if h.lost]
        for held in stale:
            try:
                w.send(w.client.delete_async, held.path).rawlink(w.on_reply)
            except KazooException:
                pass

    # -- the backend operations (blocking) -------------------------------------------------------------
    def path_of(self, token: str) -> str | None:
        """The node of a live holding of this store (a downgrade's read looks for its write's)."""
        with self._mutex:
            held = self._held.get(token)
        return None if held is None or held.lost else held.path

    def release(self, token: str) -> bool:
        held = self.unhold(token)
        if held is None:
            return False
        with self._mutex:
            under = next((h for h in self._held.values() if h.companion == token and not h.lost), None)
            if under is not None:
                under.keeps.append(held.path)
        if under is not None:
            # A downgrade: the write's node stays where it is in the queue until the read taken under it is
            # released. A writer queued behind it (ahead of the read) would hold once it went, the read
            # notwithstanding: under the recipe's order a later node never holds, and this read does.
            return self._nodes.exists(held.path) and not held.lost
        if held.keeps:
            # A weighted semaphore holding's leases (or a downgrade's read and its kept write node) go
            # together, in one multi request: its waiters never see a part of it released.
            try:
                self._nodes.delete_all([held.path, *held.keeps])
                return not held.lost
            except (KazooException, LockError):  # one already gone (an admin), or the connection: one by one
                pass
        existed = self._nodes.delete(held.path)
        for kept in held.keeps:
            self._nodes.delete(kept)
        return existed and not held.lost

    def proclaim(self, token: str, data: bytes) -> bool:
        """Replace the data of a holding's node (an election leader's value); False if the node is gone.

        setData on a vanished node fails, and a holding's node is never made again under the same name (a
        fresh UUID and sequence number each time), so success means the holding's node still existed when
        the server applied the write: no version to compare. A node deleted after that is the deletion
        watch's business, as for any holding."""
        w = self._wire
        held = self._held.get(token)
        if held is None or held.lost:
            return False
        with self._mutex:
            held.proclaiming += 1
        stat = None
        try:
            stat = w.get(w.send(w.client.set_async, held.path, data))
        except (NoNodeError, SessionExpiredError):
            return False
        finally:
            with self._mutex:
                held.proclaiming -= 1
                if stat is not None:
                    held.version = max(held.version, int(stat.version))
                # a version the watch read while the proclaim was out, past the proclaim's own: a request
                asked = stat is not None and held.proclaiming == 0 and held.read_version > held.version
        if asked:
            self._revoked(held, held.read_version, "")
        return True

    def holds(self, token: str) -> bool:
        w = self._wire
        held = self._held.get(token)
        if held is None or held.lost:
            return False
        try:
            stat = w.get(w.send(w.client.exists_async, held.path))
        except SessionExpiredError:
            return False
        return stat is not None and int(stat.ephemeralOwner) == w.session_id()

    def still_held(self, tokens: Sequence[str]) -> list[bool]:
        """Nothing to extend (the session is kazoo's business): report whether each holding still exists."""
        w = self._wire
        results = []
        pending = []
        for token in tokens:
            held = self._held.get(token)
            pending.append(None if held is None or held.lost else w.send(w.client.exists_async, held.path))
        for result in pending:
            try:
                results.append(result is not None and w.get(result) is not None)
            except SessionExpiredError:
                results.append(False)
        return results
