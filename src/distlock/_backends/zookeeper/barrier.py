"""Barriers on ZooKeeper. Blocking; the backend runs these on a worker thread (both sides import this module).

Layout::

    <root>%barriers                     a container node, the parent of every barrier of the store's root
    <root>%barriers/<P>                 the barrier whose lock path would be /P, escaped as latches are
        data: the JSON record of ``_core/barrier.py`` (open generation, its arrivals' leases, tripped markers)

    <root>%dbarriers                    a container node, the parent of every double barrier
    <root>%dbarriers/<P>                one double barrier: Curator's ``DistributedDoubleBarrier`` on this path
        <uuid>                          an ephemeral node per member (no data), made by ``enter``
        ready                           made by the member whose entry made ``parties``; deleted by the last
                                        to leave, with the barrier's node

No lock path reaches them: a lock path holds ``%`` only in escapes, with two upper-case hex digits after it.

A barrier record is read and written back with its version (compare-and-set); it is deleted when empty, and
every barrier creation deletes the records of the store's root whose every lease and marker has ended (all
their members died). A double barrier's members are session-bound: a member whose process dies goes with its
session. ``enter`` counts the members and makes ``ready`` in one multi-operation that checks each counted
member is still there, so a member that withdraws (its ``enter`` timed out) is never counted by a trip.
"""

from __future__ import annotations

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from ..._core import barrier
from ..._core.timing import wall_ms
from ..._core.types import PrimitiveInfo
from ..._errors import BackendError
from . import layout
from .nodes import Nodes
from .wire import Wire

PARENTS = {"barrier": "%barriers", "double barrier": "%dbarriers"}
READY = "ready"


def barrier_path(kind: str, name: str, root: str = layout.DEFAULT_ROOT) -> str:
    """The znode of the barrier (or double barrier) ``name`` (see the module docstring)."""
    path = layout.lock_path(name, root)
    return root + PARENTS[kind] + "/" + path[1:].replace("%", "%25").replace("/", "%2F")


class Barriers:
    """The barrier steps of one store's session."""

    def __init__(self, wire: Wire, nodes: Nodes, root: str) -> None:
        self._wire = wire
        self._nodes = nodes
        self._root = root

    # -- barriers: one record -----------------------------------------------------------------------------
    def read(self, kind: str, name: str) -> tuple[bytes | None, object]:
        w = self._wire
        try:
            data, stat = w.get(w.send(w.client.get_async, barrier_path(kind, name, self._root)))
        except NoNodeError:
            return None, None
        return data, stat.version

    def cas(self, kind: str, name: str, version: object, data: str | None) -> bool:
        path = barrier_path(kind, name, self._root)
        w = self._wire
        try:
            if version is None:
                if data is None:
                    return True
                self.sweep(kind)
                self._nodes.make_parents(self._root + PARENTS[kind])
                w.get(w.send(w.client.create_async, path, data.encode(), acl=self._nodes._acl))
            elif data is None:
                w.get(w.send(w.client.delete_async, path, version=version))
            else:
                w.get(w.send(w.client.set_async, path, data.encode(), version=version))
        except (NodeExistsError, NoNodeError, BadVersionError):
            return False  # changed since the read (or the empty container went): read again
        return True

    def sweep(self, kind: str) -> None:
        """Delete every record of the store's root whose leases and markers all ended (reads sent back to back:
        one round trip)."""
        parent = self._root + PARENTS[kind]
        w = self._wire
        paths = [f"{parent}/{child}" for child in self._nodes.children(parent)]
        sent = [w.send(w.client.get_async, path) for path in paths]
        now = wall_ms()
        for path, result in zip(paths, sent, strict=True):
            try:
                data, stat = w.get(result)
                record = barrier.decode(data)
            except (NoNodeError, ValueError):
                continue
            if record is not None and barrier.spent(record, now):
                try:
                    w.get(w.send(w.client.delete_async, path, version=stat.version))
                except (NoNodeError, BadVersionError):
                    pass

    def listing(self) -> list[tuple[str, str, PrimitiveInfo | None]]:
        """Every barrier and double barrier of the store's root: (kind, name, what ``list`` shows of it)."""
        w = self._wire
        parent = self._root + PARENTS["barrier"]
        children = self._nodes.children(parent)
        sent = [w.send(w.client.get_async, f"{parent}/{child}") for child in children]
        now = wall_ms()
        out: list[tuple[str, str, PrimitiveInfo | None]] = []
        for child, result in zip(children, sent, strict=True):
            try:
                data, _stat = w.get(result)
            except NoNodeError:
                continue
            name = layout.name_of_escaped(child, self._root)
            out.append(("barrier", name, barrier.summary("barrier", name, data, now)))
        kind = "double barrier"
        parent = self._root + PARENTS[kind]
        for child in self._nodes.children(parent):  # Curator's layout: member nodes, and "ready" once it tripped
            members = self._nodes.children(f"{parent}/{child}")
            inside = len([m for m in members if m != READY])
            name = layout.name_of_escaped(child, self._root)
            ready = READY in members
            info = PrimitiveInfo(name, kind, arrived=0 if ready else inside, tripped=inside if ready else 0)
            out.append((kind, name, info if inside else None))
        return out

    # -- double barriers: Curator's layout ---------------------------------------------------------------
    def _path(self, name: str) -> str:
        return barrier_path("double barrier", name, self._root)

    def _children(self, name: str) -> list[str]:
        return self._nodes.children(self._path(name))

    def enter(self, name: str, member: str, parties: int) -> bool:
        """Make our member node: True when ``ready`` existed before (as Curator's ``enter``) or our entry trips
        the barrier."""
        path = self._path(name)
        ready = self._nodes.exists(path + "/" + READY)
        w = self._wire
        for _ in range(3):
            self._nodes.make_parents(path)
            try:
                w.get(w.send(w.client.create_async, path + "/" + member, b"", acl=self._nodes._acl, ephemeral=True))
                break
            except NodeExistsError:
                break  # our create's lost reply was applied
            except NoNodeError:
                continue  # the server removed the empty container between the two requests
        else:
            raise BackendError(f"could not create the member node of {path}", name=name, backend=w.scheme)
        return ready or self.look(name, parties)

    def look(self, name: str, parties: int) -> bool:
        """Has the barrier tripped? Trips it when ``parties`` members are there."""
        path = self._path(name)
        children = self._children(name)
        if READY in children:
            return True
        if len(children) < parties:
            return False
        w = self._wire
        tx = w.client.transaction()
        for child in children:
            tx.check(path + "/" + child, -1)
        tx.create(path + "/" + READY, b"", acl=self._nodes._acl)
        results = w.get(w.send(tx.commit_async))
        if not any(isinstance(r, Exception) for r in results):
            return True
        return any(isinstance(r, NodeExistsError) for r in results)  # made by another member

    def withdraw(self, name: str, member: str) -> bool:
        """Take our entry back (``enter`` timed out): False, unless the barrier tripped with it (True)."""
        path = self._path(name)
        if self._nodes.exists(path + "/" + READY):
            return True
        self._nodes.delete(path + "/" + member)
        if self._nodes.exists(path + "/" + READY):
            return True  # a trip counted us just before the delete
        self._drop_empty(path)
        return False

    def leave(self, name: str, member: str) -> int:
        """Delete our member node; how many members are still in."""
        self._nodes.delete(self._path(name) + "/" + member)
        return self.members(name)

    def members(self, name: str) -> int:
        return len([c for c in self._children(name) if c != READY])

    def finish(self, name: str) -> None:
        """Every member left: delete ``ready`` and the barrier's node (unless a new member came)."""
        path = self._path(name)
        self._nodes.delete(path + "/" + READY)
        self._drop_empty(path)

    def _drop_empty(self, path: str) -> None:
        w = self._wire
        try:
            w.get(w.send(w.client.delete_async, path))
        except (NoNodeError, NotEmptyError):
            pass
