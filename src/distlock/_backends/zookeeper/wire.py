"""The bounded request seam over kazoo: every ZooKeeper request of a store goes through ``Wire``.

kazoo queues a request (``client.*_async``) and hands back an async result. This module

* stamps each request with the moment it was queued (``send``), so that its answer proves the server heard
  from this session no earlier than that: ``on_reply`` moves ``confirmed``, which the session's liveness
  (``session.py``) reads;
* waits for an answer only so long (``get``): ``operation_timeout``, and within a ``bounded`` block also the
  acquire's deadline and the asyncio cancellation flag of the step the calling thread runs;
* turns kazoo's errors into distlock's (``translated``), credentials scrubbed.

Nothing here knows about locks: node operations (``nodes.py``), holdings and the session build on it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, ConnectionLoss, KazooException, NoAuthError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

from ..._core import timing
from ..._core.text import seconds
from ..._core.timing import monotonic
from ..._errors import BackendError, LockError
from ..._url import StoreConfig, scrub

T = TypeVar("T")

#: a blocking wait of an acquire step looks at its cancellation flag this often (asyncio cancellation)
ABORT_SLICE = 0.05
#: errors kazoo makes up itself when a request got no answer (not a reply from the server)
_NO_REPLY = (ConnectionLoss, SessionExpiredError, AuthFailedError)


class Stop(BackendError):
    """A blocking step gave up: its acquire's deadline passed, or the asyncio task behind it was cancelled."""

    DEADLINE = "the acquire's timeout passed"
    CANCELLED = "cancelled"

    def __init__(self, why: str, scheme: str) -> None:
        super().__init__(why, backend=scheme)
        self.why = why


class Wire:
    """One kazoo client's requests: sent with a time stamp, waited for within bounds, errors translated."""

    def __init__(self, client: KazooClient, config: StoreConfig, op_timeout: float, started: float) -> None:
        self.client = client
        self.op_timeout = op_timeout
        self.scheme = config.scheme
        self._password = config.password
        # The moment the last request the server answered was queued. The connect request of the session
        # was sent after ``started``.
        self.confirmed = started
        self._local = threading.local()  # per thread: the deadline and abort flag of the step it runs

    def session_id(self) -> int | None:
        cid = self.client.client_id
        return int(cid[0]) if cid else None

    def send(self, request: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Queue a kazoo request (``client.*_async``); its result remembers when it was queued, which is no
        later than when kazoo sends it."""
        sent = monotonic()
        result = request(*args, **kwargs)
        result.distlock_sent = sent
        return result

    def call(self, request: Any) -> Any:
        """Queue a kazoo request object (``kazoo.protocol.serialization``; its paths carry the chroot) on the
        session as it is, stamped as ``send`` stamps. For creates: kazoo's ``create_async`` passes each
        answer on through its completion thread (to strip the chroot from the path and make parents), one
        thread hop more before the waiting thread wakes; the callers here need neither."""
        result = self.client.handler.async_result()
        result.distlock_sent = monotonic()
        self.client._call(request, result)
        return result

    def on_reply(self, result: Any) -> None:
        """A request of ours got its answer (any thread; kazoo's completion thread for ``rawlink``): the
        server heard from this session no earlier than when the request was queued. Only records."""
        sent = getattr(result, "distlock_sent", None)
        if sent is None or sent <= self.confirmed or not result.ready():
            return
        if isinstance(result.exception, _NO_REPLY):  # made up by kazoo: the server said nothing
            return
        # Unlocked: a racing thread may store an older time over a newer one, which only ends the lease
        # earlier than needed, never later.
        self.confirmed = sent

    @contextlib.contextmanager
    def bounded(self, deadline: float | None, abort: threading.Event | None) -> Iterator[None]:
        """Waits of this thread's requests in the block end at ``deadline`` (raise ``Stop``) and stop soon
        after ``abort`` is set."""
        local = self._local
        local.deadline, local.abort = deadline, abort
        try:
            yield
        finally:
            local.deadline = local.abort = None

    def get(self, result: Any) -> Any:
        """Wait for one kazoo async result, bounded: a server that does not answer within
        ``operation_timeout`` is a BackendError; within the step's deadline, a ``Stop``.

        A request that timed out needs no closed connection: ZooKeeper answers a session's requests in order
        and kazoo pairs each answer with its request, so a late answer is never read as another's.
        """
        deadline: float | None = getattr(self._local, "deadline", None)
        abort: threading.Event | None = getattr(self._local, "abort", None)
        own = timing.bound(self.op_timeout) or 0.0  # the caller's deadline, where it is sooner
        limit = monotonic() + own
        end = limit if deadline is None else min(limit, deadline)
        while True:
            left = max(0.0, end - monotonic())
            try:
                value = result.get(timeout=left if abort is None else min(left, ABORT_SLICE))
            except KazooTimeoutError as exc:
                if abort is not None and abort.is_set():
                    raise Stop(Stop.CANCELLED, self.scheme) from exc
                if monotonic() < end:
                    continue
                if deadline is not None and deadline <= limit:
                    raise Stop(Stop.DEADLINE, self.scheme) from exc
                raise BackendError(
                    f"ZooKeeper did not answer within {seconds(own)} (connection {self.client.state})",
                    backend=self.scheme,
                ) from exc
            except KazooException:
                self.on_reply(result)
                raise
            self.on_reply(result)
            return value

    def translated(self, fn: Callable[[], T], name: str | None = None) -> T:
        """Run ``fn``; a kazoo error it raises becomes a BackendError (``name``: the lock, for the message)."""
        try:
            return fn()
        except LockError:
            raise
        except NoAuthError as exc:
            raise BackendError(
                "ZooKeeper refused access (NoAuth): permission denied by a node's ACL; check the user:password"
                " in the URL and the ACLs of the root and of the lock's parent nodes",
                name=name,
                backend=self.scheme,
            ) from exc
        except KazooException as exc:
            msg = scrub(str(exc) or type(exc).__name__, self._password)
            raise BackendError(f"ZooKeeper: {type(exc).__name__}: {msg}", backend=self.scheme) from exc
