"""``inspect``, ``list`` and ``break_lock``: reading and breaking locks from their nodes (blocking).

A lock's state is its children: contenders (protected or marked children, ordered as Curator orders them:
``layout.py``) or, for a semaphore, ``leases`` and ``locks``. Holders are read from the
children's data (owner, permits) and their czxid (the fence). An election's ``latch-`` nodes hold only the
value (Curator's participant id), so their owner reads ``unknown:<child>``; their czxid is the term.
``list`` walks the tree under the root one level per round trip and skips subtrees this store's
credentials may not read. ``break_lock`` deletes every holding node; a holding of this store among them
is reported lost at once. ``request_release`` writes a release request into every holding node's data
(``layout.revoke_data``; a compare-and-set on the version it read, so it never overwrites a change it did
not see) and deletes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kazoo.exceptions import BadVersionError, ConnectionLoss, NoAuthError, NoNodeError
from kazoo.protocol.serialization import Sync

from ..._core.types import HolderInfo, LockInfo, Mode
from . import layout, records
from .holdings import Holdings
from .nodes import Nodes
from .wire import Wire

#: listings of one ``inspect`` at most, when holders leave between a listing and the read of their data
RELIST = 3
#: syncs and reads of one ``inspect`` or ``list`` at most, when the connection drops between the two
SYNC_TRIES = 3

T = TypeVar("T")


def queued(children: list[str]) -> list[str]:
    """The children of a lock or election path that queue (whoever created them): the rest (longer names'
    paths, a semaphore's ``locks`` and ``leases``) is ignored."""
    return layout.contenders(children)


class Admin:
    """The admin operations of one store."""

    def __init__(self, wire: Wire, nodes: Nodes, holdings: Holdings, root: str, epoch: Callable[[], int]) -> None:
        self._wire = wire
        self._epoch = epoch  # the backend's count of connection changes
        self._nodes = nodes
        self._holdings = holdings
        self._root = root

    def inspect(self, name: str) -> LockInfo | None:
        path = layout.lock_path(name, self._root)
        return self._after_sync(path, lambda: self._inspect_path(path, name))

    def _after_sync(self, path: str, read: Callable[[], T]) -> T:
        """``read()`` behind ZooKeeper's ``sync`` of ``path`` on the same connection.

        A server answers a read from what it has applied, which can be behind the leader (a grant another
        client's server already answered); it answers this session's reads after the sync, so they see at
        least what the leader had then. The sync is sent with no wait (no round trip of its own), and it only
        serves the reads its own connection carries: if kazoo's connection dropped between the two, the reads
        went out on the next one, on an ensemble perhaps to a server that never saw the sync and is behind.
        Then the sync and the reads are made again."""
        w = self._wire
        for _ in range(SYNC_TRIES):
            epoch = self._epoch()
            # Sent as a request object: kazoo's connection thread settles its result as it reads the answer,
            # before the reads' answers (``sync_async`` settles the result it returns later, on another thread).
            synced = w.call(Sync(f"{w.client.chroot or ''}{path}"))
            synced.rawlink(w.on_reply)
            out = read()
            # The sync's answer (or its ConnectionLoss) came before the reads' answers.
            if self._epoch() == epoch and synced.successful():
                return out
        raise ConnectionLoss(f"the connection dropped around every read of {path} ({SYNC_TRIES} tries)")

    def _inspect_path(self, path: str, name: str) -> LockInfo | None:
        for _ in range(RELIST):
            children = self._nodes.children(path)
            if not children:
                return None
            contenders = queued(children)
            if not contenders and (layout.SEM_LEASES in children or layout.SEM_LOCKS in children):
                return self._inspect_semaphore(path, name)
            if not contenders:
                return None
            held, waiters = layout.holders_of(contenders)
            holders = self._holder_infos(path, held)
            if holders:
                kind = "rwlock" if any(layout.READ_MARK in c or layout.WRITE_MARK in c for c in contenders) else "lock"
                return LockInfo(name, kind, tuple(h for h, _ in holders), waiters)
            if not waiters:
                return None
            # The holder left between the listing and the read, and a waiter is next: read again rather than
            # report a free lock (or no leader) that was never free.
        return None

    def _inspect_semaphore(self, path: str, name: str) -> LockInfo | None:
        w = self._wire
        leases_path, locks_path = f"{path}/{layout.SEM_LEASES}", f"{path}/{layout.SEM_LOCKS}"
        count = w.send(w.client.get_async, layout.count_path(path))
        leases = self._sorted_leases(self._nodes.children(leases_path))
        lockers = queued(self._nodes.children(locks_path))
        try:
            capacity = records.count_of(w.get(count)[0])
        except NoNodeError:
            capacity = None  # a Curator semaphore of a fixed size (or an older distlock): not stored
        wants = [w.send(w.client.get_async, f"{locks_path}/{c}") for c in lockers]
        found = [(_child(p), data, int(stat.czxid)) for p, data, stat in self._existing(leases_path, leases)]
        waiting: int | None = 0
        for child, result in zip(lockers, wants, strict=True):
            try:
                want = records.parse_data(w.get(result)[0], child)[1]
            except NoNodeError:
                continue
            waiting = None if want is None or waiting is None else waiting + want
        if capacity is not None and len(found) > capacity and lockers and found:
            # Curator's holder of the internal mutex makes its lease first, then waits for room: the newest
            # lease, past the capacity, while the mutex is held, is that waiter's (distlock's never waits)
            if records.parse_data(found[-1][1], found[-1][0])[1] is None:
                found.pop()
                waiting = None
        holdings = records.semaphore_holders(
            [c for c, _, _ in found], [d for _, d, _ in found], [z for _, _, z in found]
        )
        holders = tuple(
            HolderInfo(owner, fence, Mode.SEMAPHORE.value, None, permits=permits) for owner, fence, permits in holdings
        )
        if not holders:
            return None
        return LockInfo(name, "semaphore", holders, len(lockers)).weighed(capacity, waiting)

    @staticmethod
    def _sorted_leases(children: list[str]) -> list[str]:
        return sorted(queued(children), key=lambda c: layout.sort_key(c, (layout.LEASE_MARK,)))

    def _existing(self, parent: str, children: Sequence[str]) -> list[tuple[str, bytes, Any]]:
        """The data and stat of each node ``parent/child`` still there (``parent`` empty: ``children`` are whole
        paths), read in one round trip: (path, data, stat), in order; a node deleted since the listing is left
        out."""
        w = self._wire
        paths = [f"{parent}/{c}" if parent else c for c in children]
        results = [(p, w.send(w.client.get_async, p)) for p in paths]
        found = []
        for path, result in results:
            try:
                data, stat = w.get(result)
            except NoNodeError:
                continue
            found.append((path, data, stat))
        return found

    def _holder_infos(self, parent: str, children: list[str]) -> list[tuple[HolderInfo, int | None]]:
        out: list[tuple[HolderInfo, int | None]] = []
        for path, data, stat in self._existing(parent, children):
            child, fence = _child(path), int(stat.czxid)
            if layout.is_latch(child):  # an election candidate (ours or Curator's LeaderLatch): data = the value
                owner, value = records.latch_holder(data, child)
                out.append((HolderInfo(owner, fence, layout.mode_of_child(child), None, value), None))
                continue
            owner, permits = records.parse_data(data, child)
            out.append((HolderInfo(owner, fence, layout.mode_of_child(child), None), permits))
        return out

    def list_locks(self, prefix: str) -> list[LockInfo]:
        """Walk the tree under the root (one level per round trip), report every held lock under ``prefix``.

        Subtrees whose ACL does not let this client read them (another user's nodes under a shared root) are
        skipped: a store lists what its credentials can see."""
        return self._after_sync(self._root, lambda: self._walk(prefix))

    def _walk(self, prefix: str) -> list[LockInfo]:
        w = self._wire
        found: list[LockInfo] = []
        level = [self._root]
        while level:
            results = [(p, w.send(w.client.get_children_async, p)) for p in level]
            level = []
            for path, result in results:
                try:
                    children: list[str] = w.get(result)
                except NoNodeError:
                    continue
                except NoAuthError:
                    if path == self._root:
                        raise
                    continue  # another user's subtree (its ACL does not let us read it): not ours to list
                # a semaphore in use has ``leases`` (its ``locks`` container may be reaped while nobody waits)
                is_lock = bool(queued(children)) or layout.SEM_LEASES in children
                if is_lock and path != self._root:
                    name = layout.name_of(path, self._root)
                    # a semaphore's own ``locks``/``leases`` has queue nodes too, but is no name of its own
                    if name.startswith(prefix) and layout.name_refused(name, self._root) is None:
                        info = self._inspect_path(path, name)
                        if info is not None:
                            found.append(info)
                # every other child is a path: a longer name's (also below a semaphore's ``locks``/``leases``)
                level.extend(f"{path}/{c}" for c in children if not layout.is_contender(c))
        return sorted(found, key=lambda i: i.name)

    def _holding_nodes(self, name: str) -> list[str]:
        """The nodes that hold ``name``: a lock's holding children, or a semaphore's leases in their order (the
        first ``permits`` of them hold)."""
        path = layout.lock_path(name, self._root)
        contenders = queued(self._nodes.children(path))
        if contenders:
            held, _ = layout.holders_of(contenders)
            return [f"{path}/{c}" for c in held]
        leases_path = f"{path}/{layout.SEM_LEASES}"
        return [f"{leases_path}/{c}" for c in self._sorted_leases(self._nodes.children(leases_path))]

    def request_release(self, name: str, reason: str) -> bool:
        """Write a release request into the data of every node that holds ``name`` (a semaphore's leases: a
        distlock holding watches its first one; Curator's get none, ``layout.revoke_data``); True if there was
        one. Nothing is written for a free name."""
        paths = self._holding_nodes(name)
        w = self._wire
        asked = False
        for _ in range(RELIST):  # a node whose data changed between the read and the write is read again
            writes = []
            for p, data, stat in self._existing("", paths):
                new = layout.revoke_data(data, _child(p), reason)
                if new is not None:
                    writes.append((p, w.send(w.client.set_async, p, new, int(stat.version))))
            paths = []
            for p, result in writes:
                try:
                    w.get(result)
                    asked = True
                except NoNodeError:
                    continue
                except BadVersionError:
                    paths.append(p)
            if not paths:
                break
        return asked

    def break_lock(self, name: str) -> list[str]:
        """Delete every holding node of ``name``; return the paths deleted."""
        victims = self._holding_nodes(name)
        deleted = [v for v in victims if self._nodes.delete(v)]
        self._holdings.lose_paths(deleted, "broken by an admin (break_lock)")
        return deleted


def _child(path: str) -> str:
    return path.rpartition("/")[2]
