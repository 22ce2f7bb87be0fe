# GENERATED from src/distlock/_backends/etcd/_async/watch.py by scripts/gen_sync.py: edit that file, not this one.
"""An observer's watch on one election (``store.observe``): an etcd watch stream on the range ``NAME/``.

Every change of a name's queue is an event in that range -- a candidate's key created (campaign), put again
(proclaim) or deleted (resign, a lease that ran out or was revoked) -- so one stream of the whole range
wakes the observer for every change of leader or value, whoever made it (distlock, Go's
``concurrency.Election``, ``etcdctl elect``). The events are wake-ups only: the observer reads the leader
again after each, so it never depends on how a batch of events is split.

The stream is created before ``open`` returns (its ``created`` answer has come back), which is the
"armed before the first read" the observer needs; it is then read on across ``Watch.wait`` calls, so
an event that came while the observer was reading is waiting in the stream for the next call. A stream
that ends (member gone, watch cancelled or compacted, connection closed) is made again on the next member
before ``Watch.wait`` returns, and that return counts as a wake-up: the observer's read after it covers
whatever happened while no stream was open. If no member lets it make one, the observer polls until one does.
The watch needs no permission beyond reading ``NAME/``, the range the candidates write.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

from .... import _rt_sync as rt
from ...._sync.backend import SyncPrefixWatch, SyncWatch
from ...._core.text import seconds
from ...._core.timing import monotonic
from ...._errors import BackendError
from .. import keys, ops
from .gateway import Denied, Gateway
from .http import Member, Stream

#: a read that ran into its deadline: ``TimeoutError``, or a socket that the deadline made non-blocking
_READ_TIMEOUT = (TimeoutError, BlockingIOError, ssl.SSLWantReadError)


class Watch(SyncWatch):
    """One observer's stream of the events under ``NAME/`` (see the module docstring)."""

    def __init__(self, gw: Gateway, name: str, prefix: bytes | None = None, deletes_only: bool = False) -> None:
        self._gw = gw
        self._name = name
        # the range watched: ``NAME/`` (an election), or every key starting with ``prefix`` (list --watch)
        self._prefix = keys.lock_prefix(name) if prefix is None else prefix
        self._deletes_only = deletes_only  # the waiters' shared watch (``waits.py``) needs no PUT events
        self._stream: Stream | None = None
        self._pending = b""  # bytes of the stream after its last complete line
        self.member: Member | None = None  # where the stream was made
        self.started = 0  # the revision it was made at: every change after it comes down the stream

    @classmethod
    def open(cls, gw: Gateway, name: str, prefix: bytes | None = None, deletes_only: bool = False) -> Watch:
        """A watch whose stream exists on a member (``BackendError`` if none made one within the op timeout)."""
        watch = cls(gw, name, prefix, deletes_only)
        watch._arm()
        return watch

    def _arm(self) -> None:
        """Make the stream, trying the members in turn until the op timeout: return once etcd has answered
        ``created``, from when on every change of the range is sent down the stream."""
        gw = self._gw
        start, end = (self._prefix, ops.prefix_end(self._prefix)) if self._prefix else (b"\x00", b"\x00")
        create: dict[str, object] = {"key": ops.b64(start), "range_end": ops.b64(end)}  # empty: the whole keyspace
        if self._deletes_only:
            create["filters"] = ["NOPUT"]
        body = json.dumps({"create_request": create}).encode()
        deadline = monotonic() + gw.op_timeout
        last = "no member answered"
        reauth = True
        while True:
            base = gw.base
            left = max(0.05, deadline - monotonic())
            try:
                stream = gw.client.open_stream(
                    base,
                    "/v3/watch",
                    body,
                    gw.headers(),
                    timeout=min(left, gw.try_timeout),
                    connect_timeout=min(left, gw.connect_timeout),
                )
            except OSError as exc:
                last = f"{type(exc).__name__} when opening a watch"
            else:
                self._stream, self._pending = stream, b""
                try:
                    if stream.status == 200:
                        result = self.message(min(deadline, monotonic() + gw.try_timeout))
                        if result is not None and result.get("created") and not result.get("canceled"):
                            self.member = base
                            self.started = int((result.get("header") or {}).get("revision") or 0)
                            return
                        reason = "" if result is None else str(result.get("cancel_reason") or "")
                        if "permission denied" in reason:
                            raise Denied("etcd: /v3/watch: permission denied", backend=gw.scheme)
                        if "auth token" in reason and reauth and gw.username is not None:
                            # the token expired while no call needed it: a new one, and the same member again
                            reauth = False
                            self._drop()
                            gw.authenticate()
                            continue
                        last = f"watch not created ({reason or result})"
                    else:
                        last = f"HTTP {stream.status} when opening a watch"
                except OSError as exc:
                    last = f"{type(exc).__name__} when opening a watch"
                except BaseException:
                    self._drop()
                    raise
                self._drop()
            gw.rotate(base)
            if monotonic() >= deadline:
                raise gw.error(f"no watch on {self._name!r} within {seconds(gw.op_timeout)} ({last})")
            rt.sleep(0.05)

    def message(self, deadline: float) -> dict[str, Any] | None:
        """The ``result`` of the next message of the stream; None when ``deadline`` passed first. A stream
        that ended raises ``ConnectionError``."""
        stream = self._stream
        assert stream is not None
        while (cut := self._pending.find(b"\n")) < 0:
            if monotonic() >= deadline:
                return None
            try:
                data = stream.read(deadline)
            except _READ_TIMEOUT:
                return None
            if data is None:
                raise ConnectionError("the watch stream ended")
            self._pending += data
        line, self._pending = self._pending[:cut], self._pending[cut + 1 :]
        if not line.strip():
            return {}
        try:
            msg = json.loads(line)
        except ValueError:
            raise ConnectionError("unreadable message on the watch stream") from None
        result = msg.get("result") if isinstance(msg, dict) else None
        if not isinstance(result, dict):
            raise ConnectionError(f"the watch stream ended: {msg}")
        return result

    def wait(self, timeout: float) -> None:
        self.woken(timeout)

    def woken(self, timeout: float) -> bool:
        """``wait``, saying whether it woke (an event, a new stream, a poll) rather than timed out."""
        deadline = monotonic() + max(0.0, timeout)
        if self._stream is not None:
            try:
                while (result := self.message(deadline)) is not None:
                    if result.get("canceled") or result.get("compact_revision"):
                        raise ConnectionError("the watch was cancelled")
                    if result.get("events"):
                        return True
                return False
            except OSError:
                self._drop()
        # No stream (it ended, or could not be made last time): make one, then wake the observer, whose
        # read now covers the time without a stream; if no member makes one, poll.
        try:
            self._arm()
        except BackendError:
            rt.sleep(max(0.0, min(deadline - monotonic(), self.POLL)))
        return True

    def _drop(self) -> None:
        stream, self._stream, self._pending = self._stream, None, b""
        if stream is not None:
            stream.close()

    def close(self) -> None:
        self._drop()


class PrefixWatch(SyncPrefixWatch):
    """``distlock list --watch``: one stream of the events of every key starting with the prefix. A lock's
    keys are ``NAME/<lease hex>``, so each grant, release, expiry or break under the prefix is an event."""

    def __init__(self, watch: Watch) -> None:
        self._watch = watch

    @classmethod
    def open(cls, gw: Gateway, prefix: str) -> PrefixWatch:
        return cls(Watch.open(gw, prefix or "(all)", prefix.encode("utf-8")))

    def wait(self, timeout: float) -> bool:
        return self._watch.woken(timeout)

    def close(self) -> None:
        self._watch.close()
