"""Opening a store's ZooKeeper session: the URL options, a new kazoo client, or the caller's own one.

``options`` reads and checks the URL options (``root``, ``session_timeout``, ``connect_timeout``,
``suspend_grace``, ``operation_timeout``, ``lost_on``, and the TLS options of ``_tls.py``). ``start`` makes
and starts a kazoo client of our own (hosts, chroot, ``digest`` credentials and the ACL every node we create
gets, TLS to the secure client port; connection retries for ever, no command retries: every wait is bounded
above it). ``adopt`` takes the caller's started client
(``connect(client=...)``): its session, chroot and ``default_acl``, never stopped or closed by the store.
Both are blocking and return a ``Link``, from which the backend builds its session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from ..._core import timing
from ..._core.text import seconds
from ..._core.timing import monotonic
from ..._errors import BackendError, ConfigError
from ..._tls import TlsOptions, one_line, pop_tls, verify_failure
from ..._url import StoreConfig, scrub
from . import layout
from .handler import Handler
from .session import LOST_ON, SessionLog


@dataclass(frozen=True)
class Options:
    """The URL options of a ZooKeeper store."""

    root: str
    tls: TlsOptions | None  # the secure client port (``tls=true``, ``cafile``...: ``_tls.py``)
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
    tls = pop_tls(config)
    if tls is not None and client is not None:
        raise ConfigError(
            "TLS options in the URL: the given KazooClient's own settings decide (use_ssl, ca, certfile...)",
            backend=config.scheme,
        )
    config.reject_unknown()
    return Options(root, tls, session_timeout, connect_timeout, suspend_grace, op_timeout, lost_on)


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
    session_log = _ConnectLog()
    tls: dict[str, Any] = {}
    if opts.tls is not None:
        # kazoo loads a client certificate only with both files: a combined PEM serves as both
        key = opts.tls.keyfile or opts.tls.certfile
        tls = {"use_ssl": True, "ca": opts.tls.cafile, "certfile": opts.tls.certfile, "keyfile": key,
               "verify_certs": opts.tls.verify, "check_hostname": opts.tls.verify}  # fmt: skip
    client = KazooClient(
        logger=session_log,
        hosts=hosts,
        timeout=opts.session_timeout,
        auth_data=auth or None,
        default_acl=acl,
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, ignore_expire=False),
        command_retry=None,
        handler=Handler(),
        **tls,
    )
    started = monotonic()
    failure: str | None = None
    # the caller's deadline, where it is sooner (``run -w S``: connecting counts)
    within = timing.bound(opts.connect_timeout) or 0.0
    try:
        failure = _start(client, session_log, within, len(config.hosts))
    except KazooException as exc:
        failure = str(exc) or type(exc).__name__
    if failure is not None:
        client.stop()
        client.close()
        raise BackendError(
            f"cannot connect to ZooKeeper at {config.redacted} within {seconds(within)}: "
            f"{scrub(one_line(failure), config.password)}",
            backend=config.scheme,
        )
    return Link(client, acl, opts.session_timeout, session_log, started, owned=True)


class _ConnectLog(SessionLog):
    """kazoo's logger that also keeps why the last connection attempt failed (kazoo retries for ever and
    only logs it), and counts the attempts in a row whose server certificate was refused."""

    def __init__(self) -> None:
        super().__init__()
        self.last_drop: str | None = None
        self.untrusted = 0  # attempts in a row

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if isinstance(msg, str) and msg.startswith("Connection dropped") and args:
            self.last_drop = str(args[0])
            self.untrusted = self.untrusted + 1 if verify_failure(args[0]) else 0
        super().log(level, msg, *args, **kwargs)


def _start(client: KazooClient, log: _ConnectLog, timeout: float, hosts: int) -> str | None:
    """Start ``client`` within ``timeout`` (blocking), as ``KazooClient.start`` does; None once connected, else
    why not. Once every host's certificate was refused, at once: retrying makes no certificate trusted."""
    event = client.start_async()
    deadline = monotonic() + timeout
    while not client.connected:
        left = deadline - monotonic()
        if left <= 0:
            return verify_failure(log.last_drop) or log.last_drop or "connection timed out"
        if log.untrusted >= hosts:
            return verify_failure(log.last_drop)
        event.wait(min(left, 0.05))
    return None


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
            f"the given KazooClient did not answer within {seconds(opts.op_timeout)}: "
            f"{scrub(str(exc) or type(exc).__name__, config.password)}",
            backend=config.scheme,
        ) from exc
    return Link(client, acl, session_timeout, SessionLog(), started, owned=False)
