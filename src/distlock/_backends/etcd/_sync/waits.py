# GENERATED from src/distlock/_backends/etcd/_async/waits.py by scripts/gen_sync.py: edit that file, not this one.
"""The waiters' shared watch: one etcd watch stream per store and lock name, on ``NAME/``, read by one
background reader that wakes the waiter whose watched key was deleted (``mutex.py`` waits here).

Before, each waiting acquisition made a watch stream of its own for each wait (an HTTP connection, a watch on
the server, and a read to cover the moment before the watch existed): with a thousand waiters on one name, a
thousand streams. Here a store keeps one stream per name however many of its tasks or threads wait on it,
and a hand-off costs the stream one DELETE event (PUT events are filtered out on the server).

What a waiter relies on is the same as with a stream of its own: every delete of a watched key after the
read the waiter decided on (revision ``since - 1``) reaches it. The stream delivers every change after the
revision it was made at (``floor - 1``), and the reader records the revisions of the deletes it saw
lately, so a waiter that registers after the delete still finds it. A waiter whose read is older than what
the record covers (a stream made after that read, or a record trimmed since) reads its watched keys once
after registering, as a stream of its own did. A stream that ends or is cancelled wakes every waiter on it
(each re-reads the queue) and the next wait makes a new one; a stream nobody waited on for ``LINGER``
seconds is closed. Written once for both sides (generated for the sync side: there the reader is a
daemon thread).
"""

from __future__ import annotations

from .... import _rt_sync as rt
from ...._core import forks
from ...._core.timing import monotonic
from ...._errors import BackendError
from .. import ops
from .gateway import Gateway
from .http import Member
from .watch import Watch

#: a stream nobody waited on for this long is closed (a busy name keeps its stream between hand-offs)
LINGER = 5.0
#: deletes remembered per stream (a waiter whose read is older than the oldest one reads its keys instead)
_REMEMBER = 4096
#: how often the reader looks up from the stream to see whether it is still needed (a thread reader cannot be
#: interrupted: a sync store's close() waits up to this long for it)
_TICK = 0.25


class _Feed:
    """One name's stream and what it told lately."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.member: Member | None = watch.member
        # every delete at a revision >= floor is in ``deletes`` (the stream began at floor - 1)
        self.floor = watch.started + 1
        self.deletes: dict[bytes, int] = {}  # key -> revision of its last delete, oldest first
        self.waiting: dict[bytes, dict[int, rt.Waker]] = {}  # watched key -> the wakers of its waiters
        self.ended = False
        self.idle_since = monotonic()
        self.reader: rt.Background | None = None

    def seen(self, targets: dict[bytes, int], since: int) -> tuple[Member, int] | None:
        """Where and at which revision a delete of one of ``targets`` at ``since`` or later was seen."""
        for key in targets:
            rev = self.deletes.get(key, 0)
            if rev >= since and self.member is not None:
                return self.member, rev
        return None

    def record(self, key: bytes, rev: int) -> list[rt.Waker]:
        self.deletes.pop(key, None)
        self.deletes[key] = rev
        if len(self.deletes) > _REMEMBER:
            for _ in range(_REMEMBER // 2):  # the oldest half: waiters with older reads now read instead
                old = next(iter(self.deletes))
                self.floor = max(self.floor, self.deletes.pop(old) + 1)
        return list(self.waiting.get(key, {}).values())


class Waits:
    """The shared watches of one store (see the module docstring)."""

    def __init__(self, gw: Gateway) -> None:
        self._gw = gw
        self._feeds: dict[bytes, _Feed] = {}
        self._state = rt.StateGuard()
        self._opening = rt.Mutex()  # one stream per name: waiters arriving together wait for the first to make it
        self._closed = False

    def after_fork(self) -> None:
        """The shared streams (their connections and readers) are the parent's: forgotten, never closed; the
        child's waiters open their own."""
        forks.abandon(self._feeds)
        self._feeds = {}
        self._state = rt.StateGuard()
        self._opening = rt.Mutex()

    def wait_delete(
        self, prefix: bytes, targets: dict[bytes, int], since: int, timeout: float
    ) -> tuple[Member, int] | None:
        """Return when one of ``targets`` (key -> create revision, all under ``prefix``) is deleted at
        revision ``since`` or later, after ``timeout`` seconds, or at once when the stream ends (the caller
        re-reads the queue in every case): the member that saw the delete and its revision, if that is why
        it returned (the caller's re-read can go there, see ``Gateway.read_at``)."""
        deadline = monotonic() + timeout
        feed = self._feed(prefix)
        if feed is None:  # no shared stream could be made now: a stream of this wait's own
            return self._gw.watch_delete(prefix, ops.prefix_end(prefix), since, targets, timeout)
        waker = rt.Waker()
        with self._state:
            for key in targets:
                feed.waiting.setdefault(key, {})[id(waker)] = waker
            floor = feed.floor
        try:
            if since < floor and self._any_gone(prefix, targets):
                return None  # the stream may have missed it: the caller re-reads
            while True:
                with self._state:
                    hit = feed.seen(targets, since)
                    if hit is not None or feed.ended or feed.floor != floor:
                        return hit  # (a record trimmed meanwhile may have held ours: None, a re-read)
                left = deadline - monotonic()
                if left <= 0:
                    return None
                waker.wait(left)
        finally:
            with self._state:
                for key in targets:
                    group = feed.waiting.get(key)
                    if group is not None:
                        group.pop(id(waker), None)
                        if not group:
                            del feed.waiting[key]
                if not feed.waiting:
                    feed.idle_since = monotonic()

    def _feed(self, prefix: bytes) -> _Feed | None:
        with self._state:
            feed = self._feeds.get(prefix)
            if feed is not None and not feed.ended:
                return feed
        with self._opening:
            with self._state:
                feed = self._feeds.get(prefix)
                if feed is not None and not feed.ended:
                    return feed
                if self._closed:
                    return None
            try:  # bounded by the op timeout (``Watch.open`` tries the members in turn until then)
                watch = Watch.open(self._gw, prefix.decode("utf-8", "replace"), prefix, deletes_only=True)
            except BackendError:
                return None
            feed = _Feed(watch)
            with self._state:
                self._feeds[prefix] = feed
            feed.reader = rt.Background(lambda: self._read(prefix, feed), "distlock-etcd-waits")
            return feed

    def _read(self, prefix: bytes, feed: _Feed) -> None:
        """The reader of one stream: wakes the waiters of each deleted key, until the stream ends or nobody
        waited on it for ``LINGER`` seconds."""
        try:
            while not self._closed:
                with self._state:
                    if not feed.waiting and monotonic() - feed.idle_since > LINGER:
                        return
                try:
                    result = feed.watch.message(monotonic() + _TICK)
                except Exception:  # noqa: BLE001 - the stream ended or broke: its waiters re-read, the next makes one
                    return
                if result is None:
                    continue
                if result.get("canceled") or result.get("compact_revision"):
                    return
                header = int((result.get("header") or {}).get("revision") or 0)
                wake: list[rt.Waker] = []
                with self._state:
                    for ev in result.get("events") or []:
                        if ev.get("type") == "DELETE":
                            kv = ev.get("kv") or {}
                            rev = max(header, int(kv.get("mod_revision") or 0))
                            wake += feed.record(ops.unb64(kv.get("key")), rev)
                for w in wake:
                    w.notify()
        finally:
            with self._state:
                feed.ended = True
                if self._feeds.get(prefix) is feed:
                    del self._feeds[prefix]
                wakers = [w for group in feed.waiting.values() for w in group.values()]
            for w in wakers:  # they may have missed a delete: each re-reads the queue
                w.notify()
            feed.watch.close()

    def _any_gone(self, prefix: bytes, targets: dict[bytes, int]) -> bool:
        """Whether one of ``targets`` is no longer there with its create revision (one read)."""
        body = ops.prefix_range(prefix) if len(targets) > 1 else ops.range_op(next(iter(targets)))
        data = self._gw.call("/v3/kv/range", body)
        present = {(ops.unb64(kv.get("key")), int(kv.get("create_revision") or 0)) for kv in data.get("kvs") or []}
        return any((k, rev) not in present for k, rev in targets.items())

    def close(self) -> None:
        """Stop every reader (a thread sees the flag within ``_TICK``) and close its stream."""
        self._closed = True
        with self._state:
            feeds = list(self._feeds.values())
        for feed in feeds:
            if feed.reader is not None:
                feed.reader.cancel()
                feed.reader.join(_TICK + 1.0)
            feed.watch.close()
