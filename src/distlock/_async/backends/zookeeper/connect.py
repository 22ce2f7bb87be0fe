"""Opening a store's ZooKeeper session: the URL options, a new kazoo client, or the caller's own one.

``options`` reads and checks the URL options (``root``, ``session_timeout``, ``connect_timeout``,
``suspend_grace``, ``operation_timeout``, ``lost_on``). ``start`` makes and starts a kazoo client of our own
(hosts, chroot, ``digest`` credentials and the ACL every node we create gets; connection retries for ever,
no command retries: every wait is bounded above it). ``adopt`` takes the caller's started client
(``connect(client=...)``): its session, chroot and ``default_acl``, never stopped or closed by the store.
Both are blocking and return a :class:`Link`, from which the backend builds its session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from ...._core import zookeeper_layout as layout
from ...._core.timing import monotonic
from ...._errors import BackendError, ConfigError
from ...._url import StoreConfig, scrub
from .session import LOST_ON, SessionLog


@dataclass(frozen=True)
class Options:
    """The URL options of a ZooKeeper store."""

    root: str
    session_timeout: float  # requested (a given client's own setting decides instead)
    connect_timeout: float
    suspend_grace: float | None  # None: the session's own end decides
    op_timeout: float
    lost_on: str


@dataclass(frozen=True)
class Link:
    """A started kazoo client and what the store needs to know of it."""

    client: KazooClient
    acl: list[Any]  # of every node the store creates
    session_timeout: float  # the one asked for; the server may grant less (SessionLog learns it)
    session_log: SessionLog
    started: float  # the session's connect request, or the first request on a given client, was sent after this
    owned: bool  # False: the caller's client


def options(config: StoreConfig, client: object | None) -> Options:
    """Read and check the URL options (``client``: the caller's, whose own settings must not be overridden)."""
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
    return Options(root, session_timeout, connect_timeout, suspend_grace, op_timeout, lost_on)


def start(config: StoreConfig, opts: Options) -> Link:
    """A kazoo client of our own, started within ``connect_timeout`` (blocking)."""
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
    session_log = SessionLog()
    client = KazooClient(
        logger=session_log,
        hosts=hosts,
        timeout=opts.session_timeout,
        auth_data=auth or None,
        default_acl=acl,
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, ignore_expire=False),
        command_retry=None,
    )
    started = monotonic()
    try:
        client.start(timeout=opts.connect_timeout)
    except (KazooTimeoutError, KazooException) as exc:
        client.stop()
        client.close()
        raise BackendError(
            f"cannot connect to ZooKeeper at {config.redacted} within {opts.connect_timeout}s: "
            f"{scrub(str(exc) or type(exc).__name__, config.password)}",
            backend=config.scheme,
        ) from exc
    return Link(client, acl, opts.session_timeout, session_log, started, owned=True)


def adopt(config: StoreConfig, client: object, opts: Options) -> Link:
    """The caller's started KazooClient (``connect(client=...)``): its session, its chroot, its
    ``default_acl`` (world-open if it has none); one answered request first, so the liveness clock starts
    from an answer (blocking). The client is never stopped or closed by the store."""
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
        client.exists_async("/").get(timeout=opts.op_timeout)
    except (KazooTimeoutError, KazooException) as exc:
        raise BackendError(
            f"the given KazooClient did not answer within {opts.op_timeout}s: "
            f"{scrub(str(exc) or type(exc).__name__, config.password)}",
            backend=config.scheme,
        ) from exc
    return Link(client, acl, session_timeout, SessionLog(), started, owned=False)
