"""A semaphore's stored capacity and its weighted leases (blocking): Curator's ``InterProcessSemaphoreV2``
following a ``SharedCount``, on the layout of ``layout.py``.

Everything that writes the stored numbers or the leases holds the semaphore's internal mutex
(``<path>/locks``), as Curator's lease creation does. The holder reads the state in one round trip (``state``:
the semaphore node with the declared size, the capacity in force ``%count``, the leases), and once ``n`` more
leases fit it creates them in ONE multi request (``take``): all or none, never a part of a holding for others
to count. The multi checks the versions it read of the capacity (or creates it, for the first user) and of
the semaphore node, so a ``set_permits``, or a Curator ``SharedCount.start`` making the capacity outside the
mutex, between the read and the multi makes it fail, and the holder reads again.

``sweep`` (after a release or an abandoned acquire) removes the capacity and the declared size once no lease
and no internal-mutex node is left: it queues on the internal mutex itself, and only if it is alone there and
no lease exists does it delete them, with its mutex node, in one multi; anyone who queued meanwhile waits
behind it and then finds no capacity stored. A version check alone could not guard it: the semaphore's nodes
go with it and a newcomer makes them again, versions from 0. Then the emptied nodes are deleted (a delete is
refused on a node with children). ``resize`` is ``set_permits``: a versioned setData of the capacity of a
semaphore in use. ``docs/models/zookeeper_semaphore.pml`` checks this protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.protocol.states import WatchedEvent

from ..._core import arbiter
from ..._core.types import Mode
from ..._errors import BackendError, LockError
from . import layout, records
from .cleanup import Leftover
from .nodes import Entry, Nodes
from .wire import Wire

#: passes of a read-then-write before giving up (each follows a change by someone else)
MAX_PASSES = 20


@dataclass(frozen=True)
class State:
    """A semaphore as its internal mutex's holder reads it."""

    capacity: int | None  # the capacity in force (``%count``); None: not stored
    version: int  # the capacity node's data version (-1 without one)
    declared: int | None  # the size the first user declared (the semaphore node's data); None: not stored
    leases: list[str]  # the leases (contender children of ``<path>/leases``)
    changed: int  # the zxid of the last lease created or deleted (``<path>/leases``'s pzxid; 0 without it)
    #: the semaphore node's data version, which the multi checks too: a second guard (the sweep, the only
    #: other writer of that node, holds the internal mutex, so none comes between the read and the multi)
    own_version: int = -1

    def stored(self, head: int) -> arbiter.Capacity | None:
        """The numbers stored for a semaphore in use, as the holder of its internal mutex reads them (``head``:
        the czxid of its node there); None when none count. The capacity node alone (no declared size) is
        Curator's ``SharedCount``, which is there for good: its value is both numbers. With a declared size
        beside it but no lease, the numbers are a leftover when the last lease went before the head queued
        (a holder that died: nobody held or waited since, else the head would have queued behind them); a
        head that waited while the last lease went kept them in use."""
        if self.capacity is None:
            return None
        if self.declared is None:
            return arbiter.Capacity(self.capacity, self.capacity)
        if not self.leases and head > self.changed:
            return None
        return arbiter.Capacity(self.declared, self.capacity)


class Semaphores:
    """The semaphore operations of one store (blocking; bounded by the wire)."""

    def __init__(self, wire: Wire, nodes: Nodes, acl: list[Any], put_off: Callable[[list[Leftover]], None]) -> None:
        self._wire = wire
        self._nodes = nodes
        self._acl = acl
        self._put_off = put_off  # ``Cleanup.put_off``: nodes to delete once the connection lets us

    def _get(self, result: Any) -> tuple[bytes | None, Any]:
        try:
            data, stat = self._wire.get(result)
        except NoNodeError:
            return None, None
        return data, stat

    def state(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> State:
        """The capacity, declared size and leases of the semaphore at ``path``, in one round trip; ``watch``
        is told of a change of the capacity or of the leases (a waiting holder of the internal mutex)."""
        w = self._wire
        own = w.send(w.client.get_async, path)
        count = w.send(w.client.get_async, layout.count_path(path), watch=watch)
        leases = w.send(w.client.get_children_async, f"{path}/{layout.SEM_LEASES}", watch=watch, include_data=True)
        data, stat = self._get(count)
        own_data, own_stat = self._get(own)
        try:
            children, parent = w.get(leases)
        except NoNodeError:
            children, parent = [], None
        return State(
            records.count_of(data) if stat is not None else None,
            -1 if stat is None else int(stat.version),
            records.count_of(own_data),
            layout.contenders(children),
            0 if parent is None else int(parent.pzxid),
            -1 if own_stat is None else int(own_stat.version),
        )

    def take(
        self, path: str, entry: Entry, n: int, data: bytes, state: State, terms: arbiter.Capacity, write: bool
    ) -> int | None:
        """Create ``n`` leases for ``entry`` (one UUID, one multi request) with the capacity node as ``state``
        read it (``write``: its numbers become ``terms``, the capacity node created or overwritten) and the
        declared size written on the semaphore node; the fence (the multi's zxid: every lease's czxid), or
        None if the capacity node changed since the read (read again). ``entry`` learns the leases' names."""
        w = self._wire
        leases = f"{path}/{layout.SEM_LEASES}"
        count = layout.count_path(path)
        # no ``leases`` node (the name's first lease): its create goes just before the multi, same round trip
        parents = self._nodes.send_parents(leases) if not state.changed else []
        for _ in range(MAX_PASSES):
            multi = w.client.transaction()
            if state.capacity is None:
                multi.create(count, records.count_bytes(terms.capacity), acl=self._acl)
            elif write:
                multi.set_data(count, records.count_bytes(terms.capacity), state.version)
            else:
                multi.check(count, state.version)
            multi.set_data(path, records.count_bytes(terms.declared), state.own_version)
            prefix = f"{leases}/{layout.child_prefix(entry.uid, entry.mark)}"
            for _ in range(n):
                multi.create(prefix, data, acl=self._acl, ephemeral=True, sequence=True)
            entry.created = True
            sent = w.send(multi.commit_async)
            if parents:
                self._nodes.parents_made(parents)
                parents = []
            try:
                results = w.get(sent)
            except ConnectionLoss:  # the multi may have been applied: all of it or none (look by UUID)
                found = self.find(entry)
                if found is not None:
                    return found
                continue
            errors = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
            if not errors:
                names = [r.rsplit("/", 1)[1] for r in results[2:]]
                entry.name, entry.others = names[0], names[1:]
                entry.czxid = int(results[1].mzxid)  # the setData's stat: the multi's zxid
                return entry.czxid
            entry.created = False  # a failed multi applied nothing
            at, error = next(((i, r) for i, r in errors if not isinstance(r, RolledBackError)), errors[0])
            if at >= 2 and isinstance(error, NoNodeError):  # the name's first lease: no ``leases`` node yet
                self._nodes.make_parents(leases)
                continue
            if at < 2 and isinstance(error, (NoNodeError, BadVersionError, NodeExistsError)):
                return None  # the capacity was changed, made or removed, or the name swept, since the read
            raise error
        raise BackendError(f"could not create the leases under {leases}", backend=w.scheme)

    def find(self, entry: Entry) -> int | None:
        """After a multi whose reply was lost: our leases by their UUID (all or none exist), their fence."""
        own = [c for c in self._nodes.children(entry.parent) if c.startswith(layout.protected_prefix(entry.uid))]
        if not own:
            entry.created = False
            return None
        own.sort(key=lambda c: layout.sort_key(c, (layout.LEASE_MARK,)))
        entry.name, entry.others = own[0], own[1:]
        w = self._wire
        stat = w.get(w.send(w.client.exists_async, entry.path))
        if stat is None:
            raise BackendError(f"lease {entry.path} vanished while being granted", backend=w.scheme)
        entry.czxid = int(stat.czxid)
        return entry.czxid

    def _look(self, path: str) -> tuple[bool, bool]:
        """(in use, a capacity stored) in one round trip: in use while a lease or an internal-mutex node is left."""
        w = self._wire
        count = w.send(w.client.exists_async, layout.count_path(path))
        listings = [
            w.send(w.client.get_children_async, f"{path}/{sub}") for sub in (layout.SEM_LEASES, layout.SEM_LOCKS)
        ]
        stored = w.get(count) is not None
        used = False
        for result in listings:
            try:
                used = used or bool(layout.contenders(w.get(result)))
            except NoNodeError:
                pass
        return used, stored

    def sweep(self, path: str) -> None:
        """Remove the stored capacity and declared size of the semaphore at ``path`` if nobody holds or waits,
        holding its internal mutex (see the module docstring); then its emptied nodes."""
        used, stored = self._look(path)
        if used:
            return
        w = self._wire
        removal = None
        entry = Entry(f"{path}/{layout.SEM_LOCKS}", layout.MUTEX_MARK)
        try:
            if stored:
                removal = self._remove_alone(path, entry)
            # The emptied nodes go now rather than at the server's next reaper pass, in the same round trip: a
            # delete is refused on a node with children (a newcomer's node, a longer name's path, the capacity
            # if it stays), and a newcomer whose parent went makes it again (distlock and Curator both do).
            pending = [
                w.send(w.client.delete_async, node)
                for node in (f"{path}/{layout.SEM_LEASES}", f"{path}/{layout.SEM_LOCKS}", path)
            ]
            if removal is not None:
                results = w.get(removal)
                if not any(isinstance(r, BaseException) for r in results):
                    entry.reset()  # our mutex node went with the numbers
            for result in pending:
                try:
                    w.get(result)
                except (NoNodeError, NotEmptyError):
                    pass
        finally:
            if entry.created:
                self._let_go(entry)

    def _remove_alone(self, path: str, entry: Entry) -> Any:
        """Queue ``entry`` on the internal mutex; alone there (so holding it) with no lease, send the multi
        that deletes the capacity, the declared size and ``entry`` (its answer to read), else None."""
        w = self._wire
        queue = self._nodes.create_and_list(entry, records.node_data("distlock:sweep", Mode.SEMAPHORE, 0))
        if layout.contenders(queue) != [entry.name]:
            return None  # someone queued: the semaphore is theirs
        leases = w.send(w.client.get_children_async, f"{path}/{layout.SEM_LEASES}")
        count = w.send(w.client.exists_async, layout.count_path(path))
        try:
            held = bool(layout.contenders(w.get(leases)))
        except NoNodeError:
            held = False
        if held or w.get(count) is None:
            return None
        multi = w.client.transaction()
        multi.delete(layout.count_path(path))
        multi.set_data(path, b"")
        multi.delete(entry.path)
        return w.send(multi.commit_async)

    def _let_go(self, entry: Entry) -> None:
        """Delete the sweep's own mutex node; if the connection does not let us now, the store's clean-up does
        it once the server answers (a mutex node left would stall every later user)."""
        try:
            self._nodes.remove(entry)
        except (LockError, KazooException):
            self._put_off([(entry.parent, entry.name, entry.uid)])

    def resize(self, path: str, n: int) -> bool:
        """Store the capacity ``n`` for a semaphore in use (True); on a free one store nothing (False)."""
        w = self._wire
        for _ in range(MAX_PASSES):
            count = w.send(w.client.exists_async, layout.count_path(path))
            used, _stored = self._look(path)
            stat = w.get(count)
            if stat is None:
                return False
            if not used:
                self.sweep(path)  # what a holder that died left: the next first user declares the size
                return False
            try:
                w.get(w.send(w.client.set_async, layout.count_path(path), records.count_bytes(n), int(stat.version)))
                return True
            except NoNodeError:
                return False
            except BadVersionError:
                continue
        raise BackendError(f"the capacity of {path} kept changing; set_permits gave up", backend=w.scheme)
