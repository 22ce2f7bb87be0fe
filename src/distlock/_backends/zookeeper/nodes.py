"""Node operations on the ensemble, one request each or a short retry loop: list, watch, create, delete.

What makes them lock-safe lives here and nowhere else:

* ``create_protected``: Curator's protected mode. An ephemeral sequential child ``_c_<uuid>-<mark><seq>``;
  a create whose reply was lost (connection loss) may or may not have happened, so the child is first
  looked for by its UUID before another is created (F8 in docs/safety.md). ``Entry`` is one such
  child of an attempt: its UUID, whether a create was sent, its name once known.
* ``watch_exists``: a data read with a watch, never ``exists`` (a watch for the creation of a sequence
  name that is never reused would stay behind, on the server and in kazoo).
* parents are container nodes where the server has them (3.5+; persistent before), created with the
  store's ACL; ``delete`` is retried over a connection loss (it is idempotent).

The names and order of children are pure layout (``layout.py``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.protocol.serialization import Create2
from kazoo.protocol.states import WatchedEvent

from ..._errors import BackendError
from . import layout
from .wire import Wire

log = logging.getLogger("distlock")


class _CreateContainer(Create2):  # type: ignore[misc]
    """ZooKeeper's createContainer request (opcode 19): kazoo 2.x has no public call for it."""

    type = 19


#: the create flags of a lock child (kazoo's ``ephemeral=True, sequence=True``)
_EPHEMERAL_SEQUENTIAL = 1 | 2


def _new_uid() -> str:
    return str(uuid.uuid4())


@dataclass(eq=False)
class Entry:
    """One protected sequential child an attempt makes under ``parent``: ``_c_<uid>-<mark><seq>``."""

    parent: str
    mark: str
    uid: str = field(default_factory=_new_uid)
    name: str | None = None  # the child's name, once a create was answered
    created: bool = False  # a create was sent for ``uid`` (its reply may have been lost)
    czxid: int = 0  # the creation zxid of the child: the fence, if it becomes the holding
    #: the other children created with it in one multi request (a weighted semaphore holding's other leases)
    others: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"{self.parent}/{self.name}"

    @property
    def paths(self) -> list[str]:
        """The paths of its child and the children created with it."""
        return [self.path] + [f"{self.parent}/{other}" for other in self.others]

    def reset(self) -> None:
        """The child is gone (deleted by us): the next create may reuse the UUID."""
        self.name = None
        self.others = []
        self.created = False

    def renew(self) -> None:
        """The child vanished (session, admin): queue again under a fresh UUID."""
        self.reset()
        self.uid = _new_uid()


class Nodes:
    """The node operations of one store (blocking; bounded by the wire)."""

    def __init__(self, wire: Wire, acl: list[Any]) -> None:
        self._wire = wire
        self._acl = acl
        self._containers = True  # False once the server said it has no container nodes

    def children(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> list[str]:
        """The children of ``path``; none if it does not exist."""
        w = self._wire
        try:
            children: list[str] = w.get(w.send(w.client.get_children_async, path, watch=watch))
        except NoNodeError:
            return []
        return children

    def watch_exists(self, path: str, callback: Callable[[WatchedEvent], None]) -> bool:
        """Set a watch on ``path``; False if it no longer exists (then no watch is left behind).

        A data read, not ``exists``: on a missing node ``exists`` would leave a watch for its creation on the
        server and in kazoo, which never fires (sequence names are not reused), as Curator also avoids.
        """
        w = self._wire
        return self._there(w.send(w.client.get_async, path, watch=callback))

    def recheck(
        self,
        own: str,
        ahead: str,
        callback: Callable[[WatchedEvent], None],
        own_watch: Callable[[WatchedEvent], None] | None = None,
    ) -> tuple[bool, bool]:
        """Whether our own child ``own`` is still there (F6) and whether ``ahead`` (the child we wait for) is,
        watching ``ahead`` if so: a woken waiter's look at the queue without listing it. With ``own_watch``,
        ``own`` is watched too (a data read, which leaves no watch on a missing node), as a waiter next in line
        does each time it looks (when it starts to wait, and when woken with that child still ahead): the
        server registers that watch first, so a deletion of ``own`` is told before any event of ``ahead``.
        Both requests go back to back on the session: one round trip however long the queue is."""
        w = self._wire
        if own_watch is None:
            mine = w.send(w.client.exists_async, own)  # no watch: exists() leaves none on a missing node
        else:
            mine = w.send(w.client.get_async, own, watch=own_watch)
        theirs = w.send(w.client.get_async, ahead, watch=callback)
        return self._there(mine), self._there(theirs)

    def _there(self, result: Any) -> bool:
        """Whether the node of an ``exists`` or ``get`` request exists, from its answer."""
        try:
            return self._wire.get(result) is not None
        except NoNodeError:
            return False

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (no watch: a missing node would leave a creation watch behind)."""
        w = self._wire
        return w.get(w.send(w.client.exists_async, path)) is not None

    def _czxid(self, path: str) -> int:
        w = self._wire
        stat = w.get(w.send(w.client.exists_async, path))
        if stat is None:
            raise BackendError(f"lock node {path} vanished while being granted", backend=w.scheme)
        return int(stat.czxid)

    def create(self, entry: Entry, data: bytes, uncertain: bool = False) -> str:
        """Create ``entry``'s child (see ``create_protected``); ``entry`` learns its name and czxid."""
        entry.created = True
        name, entry.czxid = self.create_protected(entry.parent, entry.uid, entry.mark, data, uncertain)
        entry.name = name
        return name

    def create_and_list(self, entry: Entry, data: bytes) -> list[str]:
        """``create(entry)`` then ``children(entry.parent)`` in one round trip: both requests are sent back to
        back on the session, and ZooKeeper answers one session's requests in order, so the listing already
        holds the new child. If the pair fails (no parent yet, a lost connection) it falls back to the two
        careful calls, which make the parents and find a create whose reply was lost by its UUID."""
        w = self._wire
        entry.created = True  # from here on a clean-up must look for the child
        try:
            created = w.call(self._child_request(entry.parent, layout.child_prefix(entry.uid, entry.mark), data))
            listed = w.send(w.client.get_children_async, entry.parent)
            path, stat = w.get(created)
        except NoNodeError:  # nothing was created: the parents, the create and the listing in one round trip
            return self._create_and_list_anew(entry, data)
        except ConnectionLoss:  # the create may have happened: look for it before creating another
            self.create(entry, data, uncertain=True)
            return self.children(entry.parent)
        entry.name, entry.czxid = path.rsplit("/", 1)[1], int(stat.czxid)
        try:
            children: list[str] = w.get(listed)
        except (NoNodeError, ConnectionLoss):
            return self.children(entry.parent)
        return children

    def _create_and_list_anew(self, entry: Entry, data: bytes) -> list[str]:
        """``create_and_list`` where the parent is missing: its creates, ours and the listing back to back."""
        w = self._wire
        parents = self.send_parents(entry.parent)
        created = w.call(self._child_request(entry.parent, layout.child_prefix(entry.uid, entry.mark), data))
        listed = w.send(w.client.get_children_async, entry.parent)
        try:
            self.parents_made(parents)
            path, stat = w.get(created)
            children: list[str] = w.get(listed)
        except (NoNodeError, ConnectionLoss, UnimplementedError):  # the careful way: look for it by its UUID
            self.create(entry, data, uncertain=True)
            return self.children(entry.parent)
        entry.name, entry.czxid = path.rsplit("/", 1)[1], int(stat.czxid)
        return children

    def create_protected(
        self, parent: str, uid: str, mark: str, data: bytes, uncertain: bool = False
    ) -> tuple[str, int]:
        """Create ``parent/_c_<uid>-<mark><seq>`` (ephemeral, sequential); return (child name, czxid).

        If the reply is lost (connection loss), the create may or may not have happened: look for the
        child by its UUID before creating another one (Curator's protected mode, F8 in docs/safety.md);
        ``uncertain``: a create was already sent and its reply lost.
        """
        w = self._wire
        prefix = layout.child_prefix(uid, mark)
        for _ in range(10):
            try:
                if uncertain:
                    own = layout.find_own(self.children(parent), uid)
                    if own is not None:
                        return own, self._czxid(f"{parent}/{own}")
                path, stat = w.get(w.call(self._child_request(parent, prefix, data)))
                return path.rsplit("/", 1)[1], int(stat.czxid)
            except NoNodeError:
                self.make_parents(parent)
            except ConnectionLoss:
                uncertain = True
        raise BackendError(f"could not create a lock node under {parent}", backend=w.scheme)

    def _child_request(self, parent: str, prefix: str, data: bytes) -> Any:
        """The create of an ephemeral sequential child ``parent/prefix<seq>``, answered with its path (under
        the chroot: callers keep only its last part) and stat."""
        return Create2(f"{self._wire.client.chroot or ''}{parent}/{prefix}", data, self._acl, _EPHEMERAL_SEQUENTIAL)

    def make_parents(self, path: str) -> None:
        """Create ``path`` and its missing ancestors as container nodes (persistent on servers before 3.5).
        An ancestor deleted between its create and its child's (the last user of a barrier or semaphore removes
        the emptied nodes) fails the child's create with NoNode: the creates are sent again."""
        for _ in range(3):
            try:
                self.parents_made(self.send_parents(path))
                return
            except NoNodeError:
                continue
        self.parents_made(self.send_parents(path))

    def send_parents(self, path: str) -> list[tuple[str, Any]]:
        """Send the creates of ``path`` and its ancestors as container nodes, parents first, back to back, with
        no wait: ZooKeeper applies one session's requests in order, so each finds its parent made, and a
        request sent after them finds ``path`` (a semaphore's last user deletes its emptied nodes, and the
        next first user makes them again in the round trip of its own create). ``parents_made`` reads the
        answers."""
        parts = path.strip("/").split("/")
        paths = ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if not self._containers:
            return [(p, None) for p in paths]
        chroot = self._wire.client.chroot or ""
        return [(p, self._wire.call(_CreateContainer(chroot + p, b"", self._acl, 4))) for p in paths]

    def parents_made(self, sent: list[tuple[str, Any]]) -> None:
        """The answers of ``send_parents`` (an existing node is fine); on a server without container nodes,
        the parents are made persistent, one by one."""
        w = self._wire
        error: BaseException | None = None
        for _path, result in sent:
            if result is None:
                continue
            try:
                w.get(result)
            except NodeExistsError:
                pass
            except Exception as exc:  # noqa: BLE001 - the first error is raised once every answer is read
                error = error or exc
        if isinstance(error, UnimplementedError):
            log.info("this ZooKeeper has no container nodes: lock parents are persistent")
            self._containers = False
        elif error is not None:
            raise error
        if self._containers:
            return
        for p, _result in sent:
            try:
                w.get(w.send(w.client.create_async, p, b"", acl=self._acl))
            except NodeExistsError:
                pass

    def delete(self, path: str) -> bool:
        """Delete ``path``; True if it existed. Retried over a connection loss (delete is idempotent)."""
        w = self._wire
        retried = False
        for _ in range(5):
            try:
                w.get(w.send(w.client.delete_async, path))
                return True
            except NoNodeError:
                return retried
            except (NotEmptyError, SessionExpiredError):  # an expired session's ephemeral nodes are gone
                return False
            except ConnectionLoss:
                retried = True
        raise BackendError(f"could not delete {path}", backend=w.scheme)

    def delete_all(self, paths: Sequence[str]) -> None:
        """Delete every one of ``paths`` in ONE multi request (a ZooKeeper transaction): all or none. If one is
        already gone the server deletes none and this raises its error (NoNodeError); so does a connection
        lost before the answer (the multi may or may not have been applied: deletes are idempotent)."""
        w = self._wire
        multi = w.client.transaction()
        for path in paths:
            multi.delete(path)
        results = w.get(w.send(multi.commit_async))
        failed = [r for r in results if isinstance(r, BaseException) and not isinstance(r, RolledBackError)]
        if failed:
            raise failed[0]
        if any(isinstance(r, BaseException) for r in results):  # rolled back without a cause named
            raise RolledBackError()

    def delete_by_uuid(self, parent: str, uid: str) -> None:
        """Delete our children under ``parent`` whose names we never learned (their create's reply was lost):
        one, or a weighted semaphore holding's leases."""
        prefix = layout.protected_prefix(uid)
        for _ in range(5):
            try:
                own = [c for c in self.children(parent) if c.startswith(prefix)]
            except ConnectionLoss:
                continue
            for child in own:
                self.delete(f"{parent}/{child}")
            return
        raise BackendError(f"could not look for our node under {parent}", backend=self._wire.scheme)

    def remove(self, entry: Entry) -> None:
        """Delete ``entry``'s child if one may exist: by name, or by UUID if its create's reply was lost."""
        if entry.name is not None:
            for path in entry.paths:
                self.delete(path)
        elif entry.created:
            self.delete_by_uuid(entry.parent, entry.uid)
