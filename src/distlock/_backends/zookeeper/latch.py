"""Count-down latches on ZooKeeper: one persistent znode per latch, outside every lock's tree. Blocking; the
backend runs these on a worker thread (both sides import this module).

Layout::

    <root>%latches                      a container node, the parent of every latch of the store's root
    <root>%latches/<P>                  the latch whose lock path would be /P (``layout.lock_path``), with
                                        ``%`` written ``%25`` and ``/`` written ``%2F``: one znode per name
        data: JSON {"round", "initial", "count", "recent": [ids of the last count-downs], "linger": ms}

No lock path is at or below ``<root>%latches``: a relative name's path is below ``<root>/``, and an absolute
name whose part contains ``%`` is escaped with ``%`` followed by two hex digits, never ``%l``. So a latch and a
lock never meet, whatever their names.

Each step reads the node and writes it back with its version (compare-and-set), again on a conflict. The
count-down that reaches 0 writes count 0 and the linger: that is the done marker, which every waiter's data
watch hears. ZooKeeper has no expiry of its own: the marker is deleted by the first latch call of the name
that finds it older than its linger (its ``mtime``, the server's clock, against the caller's wall clock), and
by every latch creation on the store's root for every expired marker it lists; the container goes with its
last child.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError

from ..._core.latch import LatchState, recent_after
from ..._errors import BackendError
from . import layout
from .nodes import Nodes
from .wire import Wire

LATCHES = "%latches"


def latches_root(root: str) -> str:
    """The parent of every latch of the store's ``root``."""
    return root + LATCHES


def latch_path(name: str, root: str = layout.DEFAULT_ROOT) -> str:
    """The znode of the latch ``name`` (see the module docstring)."""
    path = layout.lock_path(name, root)
    return latches_root(root) + "/" + path[1:].replace("%", "%25").replace("/", "%2F")


def _decode(data: bytes) -> dict[str, Any] | None:
    """The latch record a node holds; None for data distlock did not write."""
    try:
        record = json.loads(data.decode("utf-8"))
    except ValueError:
        return None
    ok = isinstance(record, dict) and all(k in record for k in ("round", "initial", "count"))
    return record if ok else None


def _state(record: dict[str, Any]) -> LatchState:
    return LatchState(str(record["round"]), int(record["initial"]), max(0, int(record["count"])))


def _expired(record: dict[str, Any], stat: Any) -> bool:
    return int(record["count"]) <= 0 and stat.mtime + int(record.get("linger", 0)) <= time.time() * 1000


class Latches:
    """The latch steps of one store's session."""

    def __init__(self, wire: Wire, nodes: Nodes, root: str) -> None:
        self._wire = wire
        self._nodes = nodes
        self._root = root

    def _read(self, path: str) -> tuple[dict[str, Any], Any] | None:
        w = self._wire
        try:
            data, stat = w.get(w.send(w.client.get_async, path))
        except NoNodeError:
            return None
        record = _decode(data)
        if record is None:
            raise BackendError(
                f"the znode {path} holds no distlock latch: something else made it; remove it or use another name",
                backend=w.scheme,
            )
        return record, stat

    def _drop(self, path: str, version: int) -> None:
        """Delete an expired marker, unless it changed since it was read."""
        w = self._wire
        try:
            w.get(w.send(w.client.delete_async, path, version=version))
        except (NoNodeError, BadVersionError):
            pass

    def _records(self) -> Iterator[tuple[str, dict[str, Any], Any]]:
        """(child, record, stat) of every latch under the store's latch root (the reads sent back to back: one
        round trip for them all, as ZooKeeper answers a session's requests in order)."""
        parent = latches_root(self._root)
        w = self._wire
        children = self._nodes.children(parent)
        sent = [w.send(w.client.get_async, f"{parent}/{child}") for child in children]
        for child, result in zip(children, sent, strict=True):
            try:
                data, stat = w.get(result)
            except NoNodeError:
                continue
            record = _decode(data)
            if record is not None:
                yield child, record, stat

    def sweep(self) -> None:
        """Delete every expired done marker under the store's latch root."""
        parent = latches_root(self._root)
        for child, record, stat in self._records():
            if _expired(record, stat):
                self._drop(f"{parent}/{child}", stat.version)

    def listing(self) -> list[tuple[str, int, int]]:
        """Every latch of the store's root (name, initial, count), its done marker while it lasts."""
        out = []
        for child, record, stat in self._records():
            if not _expired(record, stat):
                state = _state(record)
                out.append((layout.name_of_escaped(child, self._root), state.initial, state.count))
        return out

    def open(self, name: str, count: int | None, round_id: str) -> LatchState | None:
        path = latch_path(name, self._root)
        w = self._wire
        while True:
            found = self._read(path)
            if found is not None and _expired(*found):
                self._drop(path, found[1].version)
                continue
            if found is not None:
                return _state(found[0])
            if count is None:
                return None
            self.sweep()
            record = {"round": round_id, "initial": count, "count": count, "recent": []}
            try:
                self._nodes.make_parents(latches_root(self._root))
                w.get(w.send(w.client.create_async, path, json.dumps(record).encode(), acl=self._nodes._acl))
            except NodeExistsError:
                continue  # another creator was first (or our create's lost reply was applied): read it
            except NoNodeError:
                continue  # the server removed the empty container between the two requests
            return _state(record)

    def count_down(self, name: str, round_id: str, step: str, linger: float) -> int:
        path = latch_path(name, self._root)
        w = self._wire
        while True:
            found = self._read(path)
            if found is None:
                return 0
            record, stat = found
            left = int(record["count"])
            if record["round"] != round_id or left <= 0 or step in record.get("recent", []):
                return max(0, left) if record["round"] == round_id else 0
            record["count"] = left - 1
            record["recent"] = recent_after(" ".join(record.get("recent", [])), step).split()
            if left == 1:
                record["linger"] = int(linger * 1000)
            try:
                w.get(w.send(w.client.set_async, path, json.dumps(record).encode(), version=stat.version))
            except (BadVersionError, NoNodeError):
                continue  # changed since the read (another count-down): read it again
            except ConnectionLoss:
                continue  # applied or not: the read again finds our step among the recent ones if it was
            return left - 1
