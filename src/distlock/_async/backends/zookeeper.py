"""``zookeeper://h1:2181,h2:2181[/chroot]`` (alias ``zk://``): Curator-compatible locks on a ZooKeeper ensemble.

One kazoo client (one ZooKeeper session) per store. Every lock kind is an ephemeral sequential child under the
lock's path, named and ordered exactly as Apache Curator does (see ``_core/zookeeper_layout.py``), so a Curator
``InterProcessMutex`` / ``InterProcessReadWriteLock`` / ``InterProcessSemaphoreV2`` on the same path and a
distlock lock exclude each other. The queue is FIFO by construction (``always_fair``).

One attempt (``try_acquire``): create our child once (protected name ``_c_<uuid>-...``; a create whose reply
was lost is found again by its UUID, F8 in docs/safety.md), list the children, and either hold the lock or set a watch on
the ONE child whose deletion may let us in (no herd, F11). A watch, a session event or a 5 s safety tick wakes
the waiter, which lists the children again and checks that its own child is still there (F6). ``abandon``
deletes whatever the attempt created, even a grant whose reply never reached the caller (F10).

Liveness is the session, not a per-lock lease (``needs_renewal=False``): the session timeout is what ``ttl`` is
on the other backends. It is judged from the last *answer*, not from kazoo's connection state: kazoo counts
every request it sends as a heartbeat, so a process that keeps sending into a dead link never goes SUSPENDED
while the server expires its session. Every request remembers when it was queued; an answer from the server
moves ``lease_end`` to that moment + the granted session timeout - the drift margin, and at ``lease_end``
every holding is reported lost (by the store's lease clock and by the backend's liveness thread, which also
sends a cheap request when nothing was answered for a quarter of the session). ``lost_on=suspended``
(Curator's standard policy) also reports loss as soon as kazoo suspends the connection. Session LOST/expired:
every holding is reported lost at once. A holder also watches its own child, so a child deleted by an admin
(``break_lock`` from anywhere) is reported lost too.

Every wait for an answer is bounded (``operation_timeout``; an acquire's later tries by its deadline; the
clean-up after a failed acquire by its own budget, what it leaves goes with the session). Callbacks on
kazoo's threads only record or signal.

Fence: the creation zxid (``czxid``) of the holder's child. zxids only grow across the whole ensemble, so the
fence keeps growing even if the lock's parent node is deleted and re-created (the sequence counter restarts).

Parents (the root and every lock path) are container nodes where the server supports them (3.5+): the server
deletes them once they are empty. With ``user:password@`` in the URL the client authenticates with the
``digest`` scheme and every node it creates gets an ACL granting everything to that identity only.

kazoo is threaded; on the async side each blocking step runs in a worker thread (``rt.run_blocking``) and
watches wake the waiting task through ``rt.Waker`` (thread-safe).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.loggingsupport import BLATHER
from kazoo.protocol.serialization import Create2
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from ... import _rt_async as rt
from ..._core import zookeeper_layout as layout
from ..._core.timing import drift_margin, monotonic
from ..._core.types import Capabilities, Claim, Grant, HolderInfo, LockInfo, Mode
from ..._errors import BackendError, ConfigError, LockError
from ..._given import given
from ..._url import StoreConfig, scrub
from ..backend import AsyncAttempt, AsyncBackend

log = logging.getLogger("distlock")

T = TypeVar("T")

#: a waiter re-checks at least this often even without a wake-up (watches are the real mechanism)
MAX_WAIT_SLICE = 5.0
#: passes of one attempt step before giving up (each pass follows a change of the queue)
MAX_PASSES = 200
#: a holding gets its deletion watch once it has lived this long (short holds never pay the extra request)
WATCH_AFTER = 0.2
#: the liveness thread makes sure some request was answered at least every session timeout / this
HEARTBEAT_DIVISOR = 4.0
#: a blocking wait of an acquire step looks at its cancellation flag this often (asyncio cancellation)
ABORT_SLICE = 0.05
#: the ``lost_on`` URL option: when holders are told ``lost``
LOST_ON = ("session", "suspended")
#: errors kazoo makes up itself when a request got no answer (not a reply from the server)
_NO_REPLY = (ConnectionLoss, SessionExpiredError, AuthFailedError)


class _Stop(BackendError):
    """A blocking step gave up: its acquire's deadline passed, or the asyncio task behind it was cancelled."""

    DEADLINE = "the acquire's timeout passed"
    CANCELLED = "cancelled"

    def __init__(self, why: str, scheme: str) -> None:
        super().__init__(why, backend=scheme)
        self.why = why


class _CreateContainer(Create2):  # type: ignore[misc]
    """ZooKeeper's createContainer request (opcode 19): kazoo 2.x has no public call for it."""

    type = 19


class _SessionLog(logging.LoggerAdapter[logging.Logger]):
    """kazoo's own logger, passed through unchanged, that also notes the session timeout the server granted.

    kazoo keeps the negotiated timeout to itself and only logs it when a session starts; the server may have
    clamped the requested one (``min/maxSessionTimeout``), and ``suspend_grace`` must follow the real one.
    """

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.negotiated: float | None = None  # seconds

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level == BLATHER and isinstance(msg, str) and "negotiated session timeout" in msg and len(args) >= 3:
            try:
                self.negotiated = float(args[2]) / 1000.0
            except (TypeError, ValueError):
                pass
        super().log(level, msg, *args, **kwargs)


@dataclass(eq=False)
class _Held:
    token: str
    name: str
    path: str  # the znode that is the holding (mutex/read/write child, or the semaphore lease)
    lost: bool = False


class Attempt(AsyncAttempt):
    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self.path = layout.lock_path(claim.name, backend.root)
        self._semaphore = claim.mode is Mode.SEMAPHORE
        # The semaphore first takes Curator's internal mutex at <path>/locks, then a lease at <path>/leases.
        self._queue = f"{self.path}/{layout.SEM_LOCKS}" if self._semaphore else self.path
        self._mark = layout.MUTEX_MARK if self._semaphore else layout.MARK_OF_MODE[claim.mode]
        self._order = Mode.EXCLUSIVE if self._semaphore else claim.mode
        self._data = layout.node_data(claim.owner, claim.mode, claim.permits)
        self._step_guard = threading.Lock()  # one blocking step at a time: abandon waits for a running try
        self._waker: rt.Waker | None = None
        self._uuid = str(uuid.uuid4())
        self._node: str | None = None  # our child in the queue (name only)
        self._created = False  # a create was sent for self._uuid (its reply may have been lost)
        self._lease_uuid = str(uuid.uuid4())
        self._lease: str | None = None
        self._lease_created = False
        self._granted: str | None = None  # path of the holding, once granted
        self._deadline: float | None = None  # the acquire's deadline, learned from wait()
        self._abort = threading.Event()  # asyncio: the task waiting for the step was cancelled

    # -- the async interface ---------------------------------------------------------------------------
    async def try_acquire(self) -> Grant:
        if self._waker is None:
            self._waker = rt.Waker()
            self.backend._watch_session(self)
        # A worker thread cannot be stopped from outside: a cancellation raises the step's abort flag, and the
        # step stops at its next wait (within ABORT_SLICE). The abandon that follows takes the step guard, so
        # it runs after the step and deletes the child it created, never before (it would leave it behind).
        try:
            grant: Grant = await rt.run_blocking(self._step)
        except BaseException:
            self._abort.set()
            raise
        if grant.acquired:
            self.backend._unwatch_session(self)
        return grant

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        assert self._waker is not None
        # the store passes what is left of the acquire's timeout: the next steps wait no longer than that
        self._deadline = None if timeout is None else monotonic() + timeout
        await self._waker.wait(MAX_WAIT_SLICE if timeout is None else min(timeout, MAX_WAIT_SLICE))

    async def abandon(self) -> None:
        self.backend._unwatch_session(self)
        await rt.run_blocking(self._abandon)

    # -- called from kazoo's threads -------------------------------------------------------------------
    def wake(self, event: WatchedEvent | None = None) -> None:
        if self._waker is not None:
            self._waker.notify()

    # -- blocking steps --------------------------------------------------------------------------------
    def _step(self) -> Grant:
        b = self.backend
        with self._step_guard, b._bounded(self._deadline, self._abort):
            try:
                return b._translated(self._step_or_requeue, self.claim.name)
            except _Stop as stop:
                if stop.why == _Stop.DEADLINE:  # the store sees the deadline passed and abandons the attempt
                    return Grant(False)
                raise

    def _step_or_requeue(self) -> Grant:
        try:
            return self._step_locked()
        except SessionExpiredError:
            # kazoo is opening a new session; our children died with the old one. Queue again once it is
            # up (the session listener wakes this attempt).
            self._forget_node()
            self._lease = None
            self._lease_created = False
            return Grant(False, retry_after=0.2)

    def _step_locked(self) -> Grant:
        b = self.backend
        for _ in range(MAX_PASSES):
            if self._node is None:
                self._created = True
                self._node, self._czxid = b._create_protected(self._queue, self._uuid, self._mark, self._data)
            children = b._children(self._queue)
            try:
                verdict = layout.verdict(self._order, layout.sort_children(children), self._node)
            except layout.NodeGone:  # our child vanished (session expired, admin): queue again, fresh name
                self._forget_node()
                continue
            if not verdict.acquired:
                assert verdict.watch is not None
                if b._watch_exists(f"{self._queue}/{verdict.watch}", self.wake):
                    return Grant(False)
                continue  # the child to watch is already gone: look again
            if not self._semaphore:
                return self._grant(f"{self._queue}/{self._node}", self._czxid)
            grant = self._lease_step()
            if grant is not None:
                return grant
        raise BackendError(f"the queue of {self.claim.name!r} kept changing; giving up this attempt", backend=b.scheme)

    def _lease_step(self) -> Grant | None:
        """Semaphore, holding the internal mutex: take a lease, wait until at most ``permits`` leases exist."""
        b = self.backend
        leases_path = f"{self.path}/{layout.SEM_LEASES}"
        if self._lease is None:
            self._lease_created = True
            self._lease, self._lease_czxid = b._create_protected(
                leases_path, self._lease_uuid, layout.LEASE_MARK, self._data
            )
        leases = b._children(leases_path, watch=self.wake)
        if self._lease not in leases:  # lost with the session: make a new one
            self._lease = None
            self._lease_uuid = str(uuid.uuid4())
            self._lease_created = False
            return None
        if len(leases) > self.claim.permits:
            return Grant(False)
        lease = f"{leases_path}/{self._lease}"
        b._delete_quiet(f"{self._queue}/{self._node}")  # Curator releases the internal mutex once leased
        self._node = None
        self._created = False
        return self._grant(lease, self._lease_czxid)

    def _grant(self, path: str, czxid: int) -> Grant:
        b = self.backend
        self._granted = path
        b._hold(_Held(self.claim.token, self.claim.name, path))
        return Grant(True, fence=czxid)

    def _forget_node(self) -> None:
        self._node = None
        self._created = False
        self._uuid = str(uuid.uuid4())

    def _abandon(self) -> None:
        b = self.backend
        # The clean-up has its own budget; what it cannot delete in time is deleted once the server answers
        # again, or goes with the session (its nodes are ephemeral).
        with self._step_guard, b._bounded(monotonic() + b.cleanup_timeout, None):
            b._translated(self._abandon_or_forget)

    def _abandon_or_forget(self) -> None:
        try:
            self._abandon_locked()
        except SessionExpiredError:  # everything this attempt created died with the session
            self.backend._unhold(self.claim.token)
        except NoAuthError:
            # The ACL of the lock's path refused us: a create it refused left nothing, and a node we could
            # create but may not list or delete there is ephemeral and goes with the session. Retrying
            # later would be refused the same way.
            self.backend._unhold(self.claim.token)
        except (LockError, KazooException) as exc:
            # The connection is down or silent: whatever is left is deleted when the server answers again
            # with this session (with a new session it is gone anyway). Never leave a node that would stall
            # the queue (F8). Not an error of the acquire: it did not get the lock, which is what it reports.
            self.backend._defer_cleanup(self._leftovers())
            log.warning("clean-up of an abandoned acquire of %r deferred: %s", self.claim.name, exc)

    def _leftovers(self) -> list[tuple[str, str | None, str]]:
        items: list[tuple[str, str | None, str]] = []
        if self._granted is not None:
            self.backend._unhold(self.claim.token)
            parent, child = self._granted.rsplit("/", 1)
            items.append((parent, child, ""))
        leases = f"{self.path}/{layout.SEM_LEASES}"
        if self._lease is not None or self._lease_created:
            items.append((leases, self._lease, self._lease_uuid))
        if self._node is not None or self._created:
            items.append((self._queue, self._node, self._uuid))
        return items

    def _abandon_locked(self) -> None:
        b = self.backend
        if self._granted is not None:  # granted, but the caller never learned it (cancelled, error)
            b._unhold(self.claim.token)
            b._delete_quiet(self._granted)
            self._granted = None
        if self._lease is not None:
            b._delete_quiet(f"{self.path}/{layout.SEM_LEASES}/{self._lease}")
        elif self._lease_created:
            b._delete_by_uuid(f"{self.path}/{layout.SEM_LEASES}", self._lease_uuid)
        if self._node is not None:
            b._delete_quiet(f"{self._queue}/{self._node}")
        elif self._created:
            b._delete_by_uuid(self._queue, self._uuid)
        self._lease = self._node = None
        self._lease_created = self._created = False

    _czxid: int = 0
    _lease_czxid: int = 0


class Backend(AsyncBackend):
    capabilities = Capabilities(modes=frozenset(Mode), fair=True, always_fair=True, needs_renewal=False)

    def __init__(
        self,
        config: StoreConfig,
        client: KazooClient,
        root: str,
        acl: list[Any],
        session_timeout: float,
        suspend_grace: float | None,
        op_timeout: float,
        session_log: _SessionLog,
        lost_on: str = "session",
        started: float = 0.0,
        owned: bool = True,
    ) -> None:
        super().__init__(config)
        self._client = client
        self._owned = owned  # False: the caller's client (connect(client=...)), never stopped or closed here
        self.root = root
        self._acl = acl
        self.session_timeout = session_timeout
        self._grace_option = suspend_grace
        self._session_log = session_log
        self._op_timeout = op_timeout
        self._guard = threading.Lock()
        self._held: dict[str, _Held] = {}
        self._waiting: set[Attempt] = set()
        self._containers = True
        self._closing = False
        self._suspend_timer: threading.Timer | None = None
        self._unwatched: list[_Held] = []
        self._deferred: list[tuple[str, str | None, str]] = []  # (parent, child or None, uuid) to delete
        self._sweep_timer: threading.Timer | None = None
        self._session = self._session_id()
        self._lost_on = lost_on
        # Liveness (see lease_end): the moment the last request the server answered was queued. The connect
        # request of the session was sent after ``started``.
        self._confirmed = started
        self._beat_sent = started
        self._beat: Any = None  # the heartbeat request in flight (a kazoo async result)
        self._local = threading.local()  # per thread: the deadline and abort flag of the step it runs
        self._liveness_wake = threading.Event()
        self._deferred_running = False
        client.add_listener(self._on_state)
        self._liveness_thread = threading.Thread(target=self._liveness, name="distlock-zk-liveness", daemon=True)
        self._liveness_thread.start()

    # -- connecting ------------------------------------------------------------------------------------
    @classmethod
    async def open(cls, config: StoreConfig) -> Backend:
        client = given(config)
        if client is not None:
            for key in ("session_timeout", "connect_timeout"):
                if key in config.params:
                    raise ConfigError(
                        f"URL option {key}: the given KazooClient's own settings decide (set it on the client)",
                        backend=config.scheme,
                    )
            if config.username is not None:
                raise ConfigError(
                    "credentials in the URL: the given KazooClient authenticates (its auth_data)",
                    backend=config.scheme,
                )
        root = config.pop("root", layout.DEFAULT_ROOT) or layout.DEFAULT_ROOT
        root = root.rstrip("/") or "/"
        problem = layout.check_root(root)
        if problem:
            raise ConfigError(f"URL option root={root!r}: {problem}", backend=config.scheme)
        session_timeout = config.pop_float("session_timeout", 10.0)
        connect_timeout = config.pop_float("connect_timeout", 10.0)
        suspend_grace: float | None = config.pop_float("suspend_grace", 0.0) or None  # None: the session decides
        op_timeout = config.pop_float("operation_timeout", min(5.0, max(1.0, session_timeout / 2.0)))
        lost_on = config.pop("lost_on", "session") or "session"
        if lost_on not in LOST_ON:
            raise ConfigError(f"URL option lost_on={lost_on!r}: use one of {', '.join(LOST_ON)}", backend=config.scheme)
        config.reject_unknown()
        if client is not None:
            adopted: Backend = await rt.run_blocking(
                cls._adopt, config, client, root, suspend_grace, op_timeout, lost_on
            )
            return adopted
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in config.hosts)
        chroot = config.path.rstrip("/")
        if chroot:
            if layout.check_root(chroot):
                raise ConfigError(f"bad chroot {chroot!r} in the URL path", backend=config.scheme)
            hosts += chroot
        auth: list[tuple[str, str]] = []
        acl: list[Any] = list(OPEN_ACL_UNSAFE)
        if config.username is not None:
            password = config.password or ""
            auth = [("digest", f"{config.username}:{password}")]
            acl = [make_digest_acl(config.username, password, all=True)]
        backend: Backend = await rt.run_blocking(
            cls._connect,
            config,
            root,
            hosts,
            auth,
            acl,
            session_timeout,
            connect_timeout,
            suspend_grace,
            op_timeout,
            lost_on,
        )
        return backend

    @classmethod
    def _connect(
        cls,
        config: StoreConfig,
        root: str,
        hosts: str,
        auth: list[tuple[str, str]],
        acl: list[Any],
        session_timeout: float,
        connect_timeout: float,
        suspend_grace: float | None,
        op_timeout: float,
        lost_on: str,
    ) -> Backend:
        session_log = _SessionLog()
        client = KazooClient(
            logger=session_log,
            hosts=hosts,
            timeout=session_timeout,
            auth_data=auth or None,
            default_acl=acl,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, ignore_expire=False),
            command_retry=None,
        )
        started = monotonic()
        try:
            client.start(timeout=connect_timeout)
        except (KazooTimeoutError, KazooException) as exc:
            client.stop()
            client.close()
            raise BackendError(
                f"cannot connect to ZooKeeper at {config.redacted} within {connect_timeout}s: "
                f"{scrub(str(exc) or type(exc).__name__, config.password)}",
                backend=config.scheme,
            ) from exc
        return cls(config, client, root, acl, session_timeout, suspend_grace, op_timeout, session_log, lost_on, started)

    @classmethod
    def _adopt(
        cls,
        config: StoreConfig,
        client: object,
        root: str,
        suspend_grace: float | None,
        op_timeout: float,
        lost_on: str,
    ) -> Backend:
        """A store on the caller's started KazooClient (``connect(client=...)``): its session, its chroot,
        its ``default_acl`` (world-open if it has none); one answered request first, so the liveness clock
        starts from an answer. The client is never stopped or closed by the store."""
        if not isinstance(client, KazooClient):
            raise ConfigError(
                f"the ZooKeeper backend takes a kazoo KazooClient; got a {type(client).__qualname__}",
                backend=config.scheme,
            )
        if not client.connected:
            raise ConfigError(
                "the given KazooClient is not connected: start() it before connect(client=...)", backend=config.scheme
            )
        chroot = config.path.rstrip("/")
        if chroot and chroot != (client.chroot or ""):
            raise ConfigError(
                f"the URL's chroot {chroot!r} is not the given KazooClient's ({client.chroot or '/'!r})",
                backend=config.scheme,
            )
        acl = list(client.default_acl or OPEN_ACL_UNSAFE)
        # kazoo keeps the session timeout the server granted to itself (it only logs it when the session
        # starts): the one the client asked for is used (see docs/zookeeper.md)
        session_timeout = client._session_timeout / 1000.0
        started = monotonic()
        try:
            client.exists_async("/").get(timeout=op_timeout)
        except (KazooTimeoutError, KazooException) as exc:
            raise BackendError(
                f"the given KazooClient did not answer within {op_timeout}s: "
                f"{scrub(str(exc) or type(exc).__name__, config.password)}",
                backend=config.scheme,
            ) from exc
        return cls(
            config,
            client,
            root,
            acl,
            session_timeout,
            suspend_grace,
            op_timeout,
            _SessionLog(),
            lost_on,
            started,
            False,
        )

    # -- plumbing --------------------------------------------------------------------------------------
    def _session_id(self) -> int | None:
        cid = self._client.client_id
        return int(cid[0]) if cid else None

    def _send(self, request: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Queue a kazoo request (``client.*_async``); its result remembers when it was queued, which is no
        later than when kazoo sends it."""
        sent = monotonic()
        result = request(*args, **kwargs)
        result.distlock_sent = sent
        return result

    def _on_reply(self, result: Any) -> None:
        """A request of ours got its answer (any thread; kazoo's completion thread for ``rawlink``): the
        server heard from this session no earlier than when the request was queued. Only records."""
        sent = getattr(result, "distlock_sent", None)
        if sent is None or sent <= self._confirmed or not result.ready():
            return
        if isinstance(result.exception, _NO_REPLY):  # made up by kazoo: the server said nothing
            return
        # Unlocked: a racing thread may store an older time over a newer one, which only ends the lease
        # earlier than needed, never later.
        self._confirmed = sent

    @contextlib.contextmanager
    def _bounded(self, deadline: float | None, abort: threading.Event | None) -> Iterator[None]:
        """Waits of this thread's requests in the block end at ``deadline`` (raise ``_Stop``) and stop soon
        after ``abort`` is set."""
        local = self._local
        local.deadline, local.abort = deadline, abort
        try:
            yield
        finally:
            local.deadline = local.abort = None

    def _get(self, result: Any) -> Any:
        """Wait for one kazoo async result, bounded: a server that does not answer within
        ``operation_timeout`` is a BackendError; within the step's deadline, a ``_Stop``.

        A request that timed out needs no closed connection: ZooKeeper answers a session's requests in order
        and kazoo pairs each answer with its request, so a late answer is never read as another's.
        """
        deadline: float | None = getattr(self._local, "deadline", None)
        abort: threading.Event | None = getattr(self._local, "abort", None)
        limit = monotonic() + self._op_timeout
        end = limit if deadline is None else min(limit, deadline)
        while True:
            left = max(0.0, end - monotonic())
            try:
                value = result.get(timeout=left if abort is None else min(left, ABORT_SLICE))
            except KazooTimeoutError as exc:
                if abort is not None and abort.is_set():
                    raise _Stop(_Stop.CANCELLED, self.scheme) from exc
                if monotonic() < end:
                    continue
                if deadline is not None and deadline <= limit:
                    raise _Stop(_Stop.DEADLINE, self.scheme) from exc
                raise BackendError(
                    f"ZooKeeper did not answer within {self._op_timeout}s (connection {self._client.state})",
                    backend=self.scheme,
                ) from exc
            except KazooException:
                self._on_reply(result)
                raise
            self._on_reply(result)
            return value

    def _translated(self, fn: Callable[[], T], name: str | None = None) -> T:
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
            msg = scrub(str(exc) or type(exc).__name__, self.config.password)
            raise BackendError(f"ZooKeeper: {type(exc).__name__}: {msg}", backend=self.scheme) from exc

    async def _call(self, fn: Callable[..., T], *args: Any, name: str | None = None) -> T:
        result: T = await rt.run_blocking(lambda: self._translated(lambda: fn(*args), name))
        return result

    def _children(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> list[str]:
        try:
            children: list[str] = self._get(self._send(self._client.get_children_async, path, watch=watch))
        except NoNodeError:
            return []
        return children

    def _watch_exists(self, path: str, callback: Callable[[WatchedEvent], None]) -> bool:
        """Set a watch on ``path``; False if it no longer exists (then no watch is left behind).

        A data read, not ``exists``: on a missing node ``exists`` would leave a watch for its creation on the
        server and in kazoo, which never fires (sequence names are not reused), as Curator also avoids.
        """
        try:
            self._get(self._send(self._client.get_async, path, watch=callback))
        except NoNodeError:
            return False
        return True

    def _czxid(self, path: str) -> int:
        stat = self._get(self._send(self._client.exists_async, path))
        if stat is None:
            raise BackendError(f"lock node {path} vanished while being granted", backend=self.scheme)
        return int(stat.czxid)

    def _create_protected(self, parent: str, uid: str, mark: str, data: bytes) -> tuple[str, int]:
        """Create ``parent/_c_<uid>-<mark><seq>`` (ephemeral, sequential); return (child name, czxid).

        If the reply is lost (connection loss), the create may or may not have happened: look for the
        child by its UUID before creating another one (Curator's protected mode, F8 in docs/safety.md).
        """
        prefix = layout.child_prefix(uid, mark)
        uncertain = False  # a create was sent and its reply lost: look before creating another one
        for _ in range(10):
            try:
                if uncertain:
                    own = layout.find_own(self._children(parent), uid)
                    if own is not None:
                        return own, self._czxid(f"{parent}/{own}")
                path, stat = self._get(
                    self._send(
                        self._client.create_async,
                        f"{parent}/{prefix}",
                        data,
                        ephemeral=True,
                        sequence=True,
                        include_data=True,
                    )
                )
                return path.rsplit("/", 1)[1], int(stat.czxid)
            except NoNodeError:
                self._make_parents(parent)
            except ConnectionLoss:
                uncertain = True
        raise BackendError(f"could not create a lock node under {parent}", backend=self.scheme)

    def _make_parents(self, path: str) -> None:
        """Create ``path`` and its missing ancestors as container nodes (persistent on servers before 3.5)."""
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self._create_container("/" + "/".join(parts[:i]))

    def _create_container(self, path: str) -> None:
        if self._containers:
            result = self._client.handler.async_result()
            chroot = self._client.chroot or ""
            try:
                result.distlock_sent = monotonic()
                self._client._call(_CreateContainer(chroot + path, b"", self._acl, 4), result)
                self._get(result)
                return
            except NodeExistsError:
                return
            except UnimplementedError:
                log.info("this ZooKeeper has no container nodes: lock parents are persistent")
                self._containers = False
        try:
            self._get(self._send(self._client.create_async, path, b"", acl=self._acl))
        except NodeExistsError:
            pass

    def _delete(self, path: str) -> bool:
        """Delete ``path``; True if it existed. Retried over a connection loss (delete is idempotent)."""
        retried = False
        for _ in range(5):
            try:
                self._get(self._send(self._client.delete_async, path))
                return True
            except NoNodeError:
                return retried
            except (NotEmptyError, SessionExpiredError):  # an expired session's ephemeral nodes are gone
                return False
            except ConnectionLoss:
                retried = True
        raise BackendError(f"could not delete {path}", backend=self.scheme)

    def _delete_quiet(self, path: str) -> None:
        self._delete(path)

    def _delete_by_uuid(self, parent: str, uid: str) -> None:
        for _ in range(5):
            try:
                own = layout.find_own(self._children(parent), uid)
            except ConnectionLoss:
                continue
            if own is not None:
                self._delete(f"{parent}/{own}")
            return
        raise BackendError(f"could not look for our node under {parent}", backend=self.scheme)

    def _defer_cleanup(self, items: list[tuple[str, str | None, str]]) -> None:
        """Remember nodes an abandon could not delete (connection down); deleted once the session is back."""
        with self._guard:
            self._deferred.extend(items)

    def _run_deferred(self) -> None:
        try:
            with self._guard:
                items, self._deferred = self._deferred, []
            for parent, child, uid in items:
                try:
                    if child is not None:
                        self._delete(f"{parent}/{child}")
                    else:
                        self._delete_by_uuid(parent, uid)
                except NoAuthError:
                    log.warning("an abandoned lock node under %s is left to the session (NoAuth)", parent)
                except (LockError, KazooException) as exc:
                    log.warning("could not delete an abandoned lock node under %s: %s", parent, exc)
                    self._defer_cleanup([(parent, child, uid)])
        finally:
            with self._guard:
                self._deferred_running = False

    # -- holdings and the session ----------------------------------------------------------------------
    def _hold(self, held: _Held) -> None:
        with self._guard:
            self._held[held.token] = held
            self._unwatched.append(held)
            if self._sweep_timer is not None or self._closing:
                return
            timer = self._sweep_timer = threading.Timer(WATCH_AFTER, self._sweep)
        timer.daemon = True
        timer.start()

    def _sweep(self) -> None:
        """Arm the deletion watch of every holding still held (batched: one timer per ``WATCH_AFTER``)."""
        with self._guard:
            batch, self._unwatched = self._unwatched, []
            self._sweep_timer = None
            batch = [h for h in batch if self._held.get(h.token) is h]
        for held in batch:
            self._arm_holder_watch(held)

    def _unhold(self, token: str) -> _Held | None:
        with self._guard:
            return self._held.pop(token, None)

    def _arm_holder_watch(self, held: _Held) -> None:
        """Watch our own holding node (no wait for the reply): its deletion by anyone else means lost."""

        def on_event(event: WatchedEvent) -> None:
            if self._held.get(held.token) is not held or held.lost:
                return
            if event.type == EventType.DELETED:
                self._lose(held, "the lock node was deleted (break_lock or an administrator)")
            elif not self._closing:  # data change, or the watch was dropped by a disconnection: re-arm
                self._arm_holder_watch(held)

        def on_reply(result: Any) -> None:
            self._on_reply(result)
            try:
                result.get_nowait()
            except NoNodeError:
                if self._held.get(held.token) is held:
                    self._lose(held, "the lock node is gone")
            except Exception:  # noqa: BLE001 - connection trouble: the session events cover it
                return

        try:
            self._send(self._client.get_async, held.path, watch=on_event).rawlink(on_reply)
        except KazooException:
            pass

    def _lose(self, held: _Held, reason: str) -> None:
        if held.lost:
            return
        held.lost = True
        self.lost(held.token, reason)

    def _lose_all(self, reason: str) -> list[_Held]:
        """Report every holding lost; the ones not lost before."""
        with self._guard:
            holdings = [h for h in self._held.values() if not h.lost]
        for held in holdings:
            self._lose(held, reason)
        return holdings

    def _watch_session(self, attempt: Attempt) -> None:
        with self._guard:
            self._waiting.add(attempt)

    def _unwatch_session(self, attempt: Attempt) -> None:
        with self._guard:
            self._waiting.discard(attempt)

    def _wake_all(self) -> None:
        with self._guard:
            waiting = list(self._waiting)
        for attempt in waiting:
            attempt.wake()

    def _on_state(self, state: str) -> None:
        """kazoo's connection listener (its own thread; must not block)."""
        if self._closing:
            return
        if state == KazooState.SUSPENDED:
            if self._lost_on == "suspended":  # Curator's standard policy: a suspended connection is a lost lock
                self._lose_all("ZooKeeper connection suspended (lost_on=suspended)")
            elif self._grace_option is not None:
                log.warning(
                    "ZooKeeper connection suspended: holders may lose their locks; lost in %.1fs unless it returns",
                    self._grace_option,
                )
                self._cancel_timer()
                timer = threading.Timer(self._grace_option, self._suspended_too_long)
                timer.daemon = True
                self._suspend_timer = timer
                timer.start()
            else:
                log.warning("ZooKeeper connection suspended: holders may lose their locks if it does not return")
        elif state == KazooState.LOST:
            self._cancel_timer()
            self._lose_all("ZooKeeper session expired or closed")
        elif state == KazooState.CONNECTED:
            self._cancel_timer()
            session = self._session_id()
            if session != self._session:
                self._lose_all("ZooKeeper session replaced by a new one")
                self._session = session
                with self._guard:
                    self._deferred.clear()  # the old session's nodes are gone with it
            self._drop_stale()
            self._start_deferred()
            self._liveness_wake.set()  # a heartbeat now: the reconnection itself is not seen as an answer
        self._wake_all()

    @property
    def suspend_grace(self) -> float | None:
        """The ``suspend_grace`` option: an extra limit on how long the connection may stay down (kazoo's
        SUSPENDED) before holders are told lost; None (the default): the session's own end decides."""
        return self._grace_option

    @property
    def granted_timeout(self) -> float:
        """The session timeout the server granted (it may clamp the requested one), in seconds."""
        return self._session_log.negotiated or self.session_timeout

    @property
    def cleanup_timeout(self) -> float:
        """Budget of the clean-up after a failed acquire (what is left is deleted later, or expires)."""
        return min(self._op_timeout, 2.0)

    # -- liveness: from the last answer, not from kazoo's connection state ------------------------------
    def lease_end(self, claim: Claim) -> float | None:
        """When the session may have expired on the server: the moment the last request the server answered
        was queued (so sent no earlier), plus the granted session timeout, minus the drift margin.

        Not kazoo's connection state: kazoo counts every request it *sends* as a heartbeat, so a process
        that keeps sending into a dead link never goes SUSPENDED while the server expires its session.
        The server restarts a session's timeout on every request it receives, so an answered request sent
        at ``t`` keeps the session alive until at least ``t`` + timeout.
        """
        timeout = self.granted_timeout
        return self._confirmed + timeout - drift_margin(timeout)

    def _liveness(self) -> None:
        """The liveness thread, one per store: asks something cheap (``exists /``) whenever nothing else was
        answered for a quarter of the session timeout, and reports every holding lost once ``lease_end``
        passed (the store's lease clock does the same; whichever is first). Requests only, never a wait
        for an answer: a silent server does not hold this thread up."""
        wake = self._liveness_wake
        while not self._closing:
            timeout = self.granted_timeout
            beat = timeout / HEARTBEAT_DIVISOR
            now = monotonic()
            end = self._confirmed + timeout - drift_margin(timeout)
            if now >= end:
                lost = self._lose_all(
                    f"no answer from ZooKeeper for {now - self._confirmed:.1f}s of a {timeout:g}s session: "
                    "the server may have expired it"
                )
                for held in lost:  # if the server answers again with this session, the nodes go (no wait)
                    with contextlib.suppress(KazooException):
                        self._send(self._client.delete_async, held.path).rawlink(self._on_reply)
            elif self._deferred and now - self._confirmed < beat:
                self._start_deferred()  # answers again without a reconnection (a healed silent link)
            # One heartbeat in flight at most: a request sent while the last one is unanswered would make kazoo
            # count the link as alive (it suspends a connection only after a silence in *both* directions),
            # and so keep it from moving to another member before the session ends.
            idle = self._beat is None or self._beat.ready()
            if idle and now - self._confirmed >= beat and now - self._beat_sent >= beat and self._client.connected:
                self._beat_sent = now
                with contextlib.suppress(KazooException):
                    self._beat = self._send(self._client.exists_async, "/")
                    self._beat.rawlink(self._on_beat)
            with self._guard:
                holding = any(not h.lost for h in self._held.values())
            if self._beat is not None and not self._beat.ready():
                nxt = now + beat  # its answer wakes this thread (_on_beat)
            else:
                nxt = max(self._confirmed, self._beat_sent) + beat
            if holding:
                nxt = min(nxt, end)
            wake.wait(min(max(0.005, nxt - monotonic()), beat))
            wake.clear()

    def _on_beat(self, result: Any) -> None:
        """The heartbeat's answer (kazoo's completion thread): record it and let the liveness thread go on."""
        self._on_reply(result)
        self._liveness_wake.set()

    def _start_deferred(self) -> None:
        with self._guard:
            if not self._deferred or self._deferred_running:
                return
            self._deferred_running = True
        threading.Thread(target=self._run_deferred, name="distlock-zk-cleanup", daemon=True).start()

    def _cancel_timer(self) -> None:
        timer, self._suspend_timer = self._suspend_timer, None
        if timer is not None:
            timer.cancel()

    def _suspended_too_long(self) -> None:
        if self._client.state != KazooState.CONNECTED and not self._closing:
            self._lose_all(f"ZooKeeper connection down for {self.suspend_grace:.1f}s: the session may be expired")

    def _drop_stale(self) -> None:
        """After a reconnect: delete nodes of holdings already reported lost (the session survived)."""
        with self._guard:
            stale = [h for h in self._held.values() if h.lost]
        for held in stale:
            with contextlib.suppress(KazooException):
                self._send(self._client.delete_async, held.path).rawlink(self._on_reply)

    # -- operations (blocking; run in a worker thread on the async side) ------------------------------
    def _release(self, claim: Claim) -> bool:
        held = self._unhold(claim.token)
        if held is None:
            return False
        existed = self._delete(held.path)
        return existed and not held.lost

    def _holds(self, claim: Claim) -> bool:
        held = self._held.get(claim.token)
        if held is None or held.lost:
            return False
        try:
            stat = self._get(self._send(self._client.exists_async, held.path))
        except SessionExpiredError:
            return False
        return stat is not None and int(stat.ephemeralOwner) == self._session_id()

    def _renew(self, claims: Sequence[Claim]) -> list[bool]:
        """Nothing to extend (the session is kazoo's business): report whether each holding still exists."""
        results = []
        pending = []
        for claim in claims:
            held = self._held.get(claim.token)
            pending.append(None if held is None or held.lost else self._send(self._client.exists_async, held.path))
        for result in pending:
            try:
                results.append(result is not None and self._get(result) is not None)
            except SessionExpiredError:
                results.append(False)
        return results

    def _inspect_path(self, path: str, name: str) -> LockInfo | None:
        children = self._children(path)
        if not children:
            return None
        contenders = [c for c in children if c.startswith(layout.PROTECTED) or _marked(c)]
        if not contenders and (layout.SEM_LEASES in children or layout.SEM_LOCKS in children):
            return self._inspect_semaphore(path, name)
        if not contenders:
            return None
        held, waiters = layout.holders_of(contenders)
        holders = self._holder_infos(path, held)
        if not holders:
            return None
        kind = "rwlock" if any(layout.READ_MARK in c or layout.WRITE_MARK in c for c in contenders) else "lock"
        return LockInfo(name, kind, tuple(h for h, _ in holders), waiters)

    def _inspect_semaphore(self, path: str, name: str) -> LockInfo | None:
        leases_path = f"{path}/{layout.SEM_LEASES}"
        leases = sorted(self._children(leases_path), key=lambda c: layout.sort_key(c, (layout.LEASE_MARK,)))
        lockers = self._children(f"{path}/{layout.SEM_LOCKS}")
        infos = self._holder_infos(leases_path, leases)
        permits = next((p for _, p in infos if p is not None), len(infos))
        holders = [h for h, _ in infos][:permits]
        if not holders:
            return None
        return LockInfo(name, "semaphore", tuple(holders), len(lockers))

    def _holder_infos(self, parent: str, children: list[str]) -> list[tuple[HolderInfo, int | None]]:
        results = [(c, self._send(self._client.get_async, f"{parent}/{c}")) for c in children]
        out = []
        for child, result in results:
            try:
                data, stat = self._get(result)
            except NoNodeError:
                continue
            owner, permits = layout.parse_data(data, child)
            out.append((HolderInfo(owner, int(stat.czxid), layout.mode_of_child(child), None), permits))
        return out

    def _inspect_name(self, name: str) -> LockInfo | None:
        return self._inspect_path(layout.lock_path(name, self.root), name)

    def _list(self, prefix: str) -> list[LockInfo]:
        """Walk the tree under the root (one level per round trip), report every held lock under ``prefix``.

        Subtrees whose ACL does not let this client read them (another user's nodes under a shared root) are
        skipped: a store lists what its credentials can see."""
        found: list[LockInfo] = []
        level = [self.root]
        while level:
            results = [(p, self._send(self._client.get_children_async, p)) for p in level]
            level = []
            for path, result in results:
                try:
                    children: list[str] = self._get(result)
                except NoNodeError:
                    continue
                except NoAuthError:
                    if path == self.root:
                        raise
                    continue  # another user's subtree (its ACL does not let us read it): not ours to list
                is_lock = any(c.startswith(layout.PROTECTED) or _marked(c) for c in children) or (
                    layout.SEM_LEASES in children and layout.SEM_LOCKS in children
                )
                if is_lock and path != self.root:
                    name = layout.name_of(path, self.root)
                    if name.startswith(prefix):
                        info = self._inspect_path(path, name)
                        if info is not None:
                            found.append(info)
                skip = {layout.SEM_LEASES, layout.SEM_LOCKS} if is_lock else set()
                level.extend(f"{path}/{c}" for c in children if not (c.startswith(layout.PROTECTED) or c in skip))
        return sorted(found, key=lambda i: i.name)

    def _break(self, name: str) -> list[str]:
        """Delete every holding child of ``name``; return the tokens of our own holdings among them."""
        path = layout.lock_path(name, self.root)
        children = self._children(path)
        contenders = [c for c in children if c.startswith(layout.PROTECTED) or _marked(c)]
        if contenders:
            held, _ = layout.holders_of(contenders)
            victims = [f"{path}/{c}" for c in held]
        else:
            leases_path = f"{path}/{layout.SEM_LEASES}"
            victims = [f"{leases_path}/{c}" for c in self._children(leases_path)]
        deleted = [v for v in victims if self._delete(v)]
        with self._guard:
            ours = [h for h in self._held.values() if h.path in deleted]
        for h in ours:
            self._lose(h, "broken by an admin (break_lock)")
        return deleted

    # -- the backend interface -------------------------------------------------------------------------
    def attempt(self, claim: Claim) -> Attempt:
        return Attempt(self, claim)

    async def release(self, claim: Claim) -> bool:
        return await self._call(self._release, claim)

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        return await self._call(self._renew, claims)

    async def holds(self, claim: Claim) -> bool:
        return await self._call(self._holds, claim)

    async def inspect(self, name: str) -> LockInfo | None:
        return await self._call(self._inspect_name, name, name=name)

    async def list(self, prefix: str) -> list[LockInfo]:
        return await self._call(self._list, prefix)

    async def break_lock(self, name: str) -> bool:
        return bool(await self._call(self._break, name, name=name))

    async def aclose(self) -> None:
        self._closing = True
        self._liveness_wake.set()
        self._cancel_timer()
        with self._guard:
            sweep, self._sweep_timer = self._sweep_timer, None
        if sweep is not None:
            sweep.cancel()
        await rt.run_blocking(self._close)

    def _close(self) -> None:
        if not self._owned:  # the caller's client: only our listener goes
            self._client.remove_listener(self._on_state)
            return
        try:
            self._client.stop()
        finally:
            self._client.close()


def _marked(child: str) -> bool:
    return any(m in child for m in (layout.MUTEX_MARK, layout.READ_MARK, layout.WRITE_MARK, layout.LEASE_MARK))
