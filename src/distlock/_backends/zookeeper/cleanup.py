"""Clean-up after an acquire that did not succeed: every node it may have left goes (F8, F10 in docs/safety.md).

An attempt records what it may have created in ``Traces``: its queue child, its semaphore lease, and
the holding it was granted but whose caller never learned it (cancelled, error). ``abandon`` deletes all
of it within its own budget. What cannot be deleted now (the connection is down or silent) is remembered
and deleted by ``Cleanup`` once the server answers again with this session (``start``); with a new
session it went with the old one (``clear``). A node left in a queue would stall every later waiter.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from kazoo.exceptions import KazooException, NoAuthError, SessionExpiredError

from ..._errors import LockError
from .holdings import Holdings
from .nodes import Entry, Nodes

log = logging.getLogger("distlock")

#: a node to delete later: (parent, child or None, uuid); without the child's name it is found by its uuid
Leftover = tuple[str, str | None, str]
#: at most this many deletes go in one multi request (a few hundred bytes each: far below the server's 1 MB
#: ``jute.maxbuffer``)
MULTI_MAX = 200


@dataclass(eq=False)
class Traces:
    """What one acquire attempt may have left on the server."""

    token: str
    name: str
    node: Entry  # its child in the queue (a semaphore's: in Curator's internal mutex)
    lease: Entry  # a semaphore's lease
    granted: str | None = None  # path of the holding, once granted

    def cleared(self) -> None:
        """Everything it left was deleted."""
        self.granted = None
        self.lease.reset()
        self.node.reset()

    def leftovers(self) -> list[Leftover]:
        items: list[Leftover] = []
        if self.granted is not None:
            parent, child = self.granted.rsplit("/", 1)
            items.append((parent, child, ""))
        for entry in (self.lease, self.node):
            if entry.name is None:
                if entry.created:
                    items.append((entry.parent, None, entry.uid))
                continue
            # a weighted semaphore holding's other leases too (the holding itself is listed once)
            items.extend((entry.parent, child, entry.uid) for child in [entry.name, *entry.others])
        return [item for i, item in enumerate(items) if item[:2] not in (x[:2] for x in items[:i])]


class Cleanup:
    """The clean-up of one store's abandoned attempts, and the deletions it had to put off."""

    def __init__(self, nodes: Nodes, holdings: Holdings, op_timeout: float) -> None:
        self._nodes = nodes
        self._holdings = holdings
        #: budget of the clean-up after a failed acquire (what is left is deleted later, or expires)
        self.budget = min(op_timeout, 2.0)
        self._mutex = threading.Lock()
        self.deferred: list[Leftover] = []
        self._running = False

    def abandon(self, traces: Traces) -> None:
        """Delete what ``traces`` says (blocking); put off what the connection does not let us delete now."""
        try:
            self._remove(traces)
        except SessionExpiredError:  # everything this attempt created died with the session
            self._holdings.unhold(traces.token)
        except NoAuthError:
            # The ACL of the lock's path refused us: a create it refused left nothing, and a node we could
            # create but may not list or delete there is ephemeral and goes with the session. Retrying
            # later would be refused the same way.
            self._holdings.unhold(traces.token)
        except (LockError, KazooException) as exc:
            # The connection is down or silent: whatever is left is deleted when the server answers again
            # with this session (with a new session it is gone anyway). Never leave a node that would stall
            # the queue (F8). Not an error of the acquire: it did not get the lock, which is what it reports.
            if traces.granted is not None:
                self._holdings.unhold(traces.token)
            self.defer(traces.leftovers())
            log.warning("clean-up of an abandoned acquire of %r deferred: %s", traces.name, exc)

    def abandon_all(self, many: list[Traces]) -> None:
        """``abandon`` of many attempts at once (a store's waiters giving up together: one delete each
        cost a thousand of them up to 0.3 s past their deadline). The nodes whose names are known go in one
        multi request per MULTI_MAX; a multi that fails (one node already gone makes the server delete none; a
        lost connection) and every attempt with a node whose name is unknown (a create whose reply was
        lost, found by its UUID) are cleaned up one by one, as ``abandon`` does."""
        chunks: list[tuple[list[Traces], list[str]]] = []
        alone: list[Traces] = []
        for traces in many:
            items = traces.leftovers()
            if any(child is None for _, child, _ in items):
                alone.append(traces)
                continue
            if not chunks or len(chunks[-1][1]) + len(items) > MULTI_MAX:
                chunks.append(([], []))
            chunks[-1][0].append(traces)
            chunks[-1][1].extend(f"{parent}/{child}" for parent, child, _ in items)
        for batch, paths in chunks:
            for traces in batch:  # before the deletes: a holding's own watch must not report them as a loss
                if traces.granted is not None:
                    self._holdings.unhold(traces.token)
            if paths:
                try:
                    self._nodes.delete_all(paths)
                except (LockError, KazooException):
                    alone.extend(batch)
                    continue
            for traces in batch:
                traces.cleared()
        for traces in alone:
            self.abandon(traces)

    def _remove(self, traces: Traces) -> None:
        if traces.granted is not None:  # granted, but the caller never learned it (cancelled, error)
            self._holdings.unhold(traces.token)
            self._nodes.delete(traces.granted)
            traces.granted = None
        self._nodes.remove(traces.lease)
        self._nodes.remove(traces.node)
        traces.cleared()

    # -- deletions put off until the session answers again -----------------------------------------------
    def defer(self, items: list[Leftover]) -> None:
        """Remember nodes an abandon could not delete (connection down); deleted once the session is back."""
        with self._mutex:
            self.deferred.extend(items)

    def put_off(self, items: list[Leftover]) -> None:
        """Nodes an abandon did not get to (no turn, or its step still running, within the budget) while the
        connection may be fine: deleted now in the background, not only once the session answers again (an
        event that a healthy connection never sends; a node left in a queue stalls every later waiter)."""
        self.defer(items)
        self.start()

    def clear(self) -> None:
        """A new session: the old session's nodes are gone with it."""
        with self._mutex:
            self.deferred.clear()

    def start(self) -> None:
        """The server answers again with this session: delete what was put off (in a thread of its own)."""
        with self._mutex:
            if not self.deferred or self._running:
                return
            self._running = True
        threading.Thread(target=self._run, name="distlock-zk-cleanup", daemon=True).start()

    def _run(self) -> None:
        try:
            with self._mutex:
                items, self.deferred = self.deferred, []
            for parent, child, uid in items:
                try:
                    if child is not None:
                        self._nodes.delete(f"{parent}/{child}")
                    else:
                        self._nodes.delete_by_uuid(parent, uid)
                except NoAuthError:
                    log.warning("an abandoned lock node under %s is left to the session (NoAuth)", parent)
                except (LockError, KazooException) as exc:
                    log.warning("could not delete an abandoned lock node under %s: %s", parent, exc)
                    self.defer([(parent, child, uid)])
        finally:
            with self._mutex:
                self._running = False
