"""Single Redis node: ``redis://``, ``rediss://`` (TLS), ``unix:///path.sock``. Driver: redis-py.

Every operation is one Lua script call, one round trip (``_core/redis_lua.py`` has the scripts, the key
layout and the grant rule). A plain ``lock(name)`` is the redis-py layout: key = the name, value = the
token, ``PX`` = the lease, so a redis-py ``Lock(name)`` and a distlock lock exclude each other. The fence
comes from the store's one counter (one per hash slot on a cluster) in the same script; nothing of a name
stays on the server once it is free. A store remembers the marker of each counter it used and refuses to
acquire when the counter went missing (flush, eviction, restart without persistence).

Waiting is push: a waiter that failed is entered in the name's wait queue (with its own short deadline,
refreshed on every re-check), subscribes to the name's channel on the store's one pub/sub connection,
re-checks once the subscription is confirmed, then sleeps until a release publishes its token (one
waiter per release) or until the holder's lease ends (a holder that never signals, such as a redis-py
Lock or a crashed process, cannot strand it).

URL options: ``wait_replicas=N`` and ``wait_timeout=ms`` (WAIT for N replicas after each acquire;
fewer acknowledgements -> the lock is released and ``BackendError`` is raised), ``connect_timeout``
and ``socket_timeout`` (seconds), ``cluster`` (``auto``: a seed that reports ``cluster_enabled:1`` is
used through redis-py's ``RedisCluster``; ``true``/``false`` force it), ``fence_counter`` (the key of the
store's fence counter, default ``distlock:fences``; on a cluster the prefix of the per-slot counters: a tenant
limited to its own key pattern names one inside it), plus redis-py's own URL options (``ssl_*``,
``client_name``, ...).

Redis Cluster: every key of one name is in the slot of the name (hash tag ``{name}``), so each script
runs on the one master that owns the name; the wake-up is a classic ``PUBLISH``, which the cluster
broadcasts to every node, so the one pub/sub connection may be on any node. A name whose keys would fall
in different slots (it contains ``}``) is refused with ``ConfigError``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit

from redis.backoff import NoBackoff
from redis.connection import URL_QUERY_ARGUMENT_PARSERS
from redis.crc import key_slot
from redis.exceptions import NoScriptError, RedisClusterException, RedisError
from redis.retry import Retry

from ... import _redis_async as drv
from ... import _rt_async as rt
from ..._core import redis_lua as lua
from ..._core.timing import lease_end, monotonic, wait_slice
from ..._core.types import Capabilities, Claim, Grant, LockInfo, Mode
from ..._errors import BackendError, ConfigError
from ..._given import given
from ..._url import StoreConfig, scrub
from ..backend import AsyncAttempt, AsyncBackend
from .redis_listener import Listener
from .redis_wire import Restarted, Wire, every_master, read_run_id

#: a waiter's queue entry lives this long unless refreshed by a re-check (F12 in docs/safety.md)
WAITER_TTL = 5.0
#: the longest a waiter sleeps between re-checks when no hint says otherwise (refreshes its entry)
MAX_WAIT_SLICE = 2.0
#: how long a waiter waits for the server to confirm its subscription before relying on hints
SUBSCRIBE_TIMEOUT = 1.0

_OURS = ("wait_replicas", "wait_timeout", "connect_timeout", "socket_timeout", "cluster", "fence_counter")

log = logging.getLogger("distlock")


def driver_url(config: StoreConfig, host: tuple[str, int] | None = None) -> str:
    """The URL for redis-py: our own options removed, redis-py's own query options kept."""
    parts = urlsplit(config.url)
    scheme = parts.scheme.lower()
    netloc = parts.netloc
    if host is not None:  # one master of a redlock:// URL
        scheme = "rediss" if config.tls else "redis"
        userinfo = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
        h, p = host
        netloc = f"{userinfo}[{h}]:{p}" if ":" in h else f"{userinfo}{h}:{p}"
    passthrough = {k: v for k, v in config.params.items() if _is_driver_option(k)}
    query = urlencode(passthrough)
    return f"{scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def _is_driver_option(key: str) -> bool:
    return key in URL_QUERY_ARGUMENT_PARSERS or key.startswith("ssl_") or key in ("client_name", "db")


def reject_unknown(config: StoreConfig) -> None:
    """redis-py's own URL options were passed on by :func:`driver_url`; anything else is a typo."""
    for key in [k for k in config.params if _is_driver_option(k)]:
        config.params.pop(key)
    config.reject_unknown()


#: what a caller of this side of the API gives ``connect(client=...)``
_WANT = (
    "the asyncio store (distlock.connect_async) needs a redis.asyncio.Redis client or redis.asyncio.ConnectionPool; "
    "a redis.Redis client goes to distlock.connect()"
    if rt.IS_ASYNC
    else "the sync store (distlock.connect) needs a redis.Redis client or redis.ConnectionPool; a redis.asyncio "
    "client goes to distlock.connect_async()"
)


def derive(given: object, connect_timeout: float, socket_timeout: float, max_connections: int = 4096) -> drv.Client:
    """distlock's own client for ``connect(client=...)``: the connection parameters of the caller's client or
    pool (host or socket, TLS, credentials, db, protocol) with distlock's timeouts and retry, in a pool of its
    own. The caller's object is only read: none of its connections is used, nothing of it is closed.

    A client of the other side, a cluster client, a Sentinel pool or anything else is a ``ValueError``
    whose text says what is needed."""
    pool: Any = given.connection_pool if isinstance(given, drv.Client) else given
    if not isinstance(pool, drv.ConnectionPool):
        kind = f"{type(given).__module__}.{type(given).__qualname__}"
        if isinstance(given, drv.ClusterClient) or "Cluster" in type(given).__name__:
            raise ValueError(
                f"a Redis Cluster client ({kind}) is not taken: give a redis:// URL of one node instead "
                "(distlock makes its own cluster client)"
            )
        raise ValueError(f"{_WANT}; got a {kind}")
    if "Sentinel" in type(pool).__name__:
        raise ValueError("a Sentinel-managed pool is not taken: give a redis:// URL of the master instead")
    kwargs = {
        **pool.connection_kwargs,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "retry": Retry(NoBackoff(), 1),
    }
    own = drv.ConnectionPool(
        connection_class=pool.connection_class, max_connections=max_connections, **kwargs
    )
    client: drv.Client = drv.Client.from_pool(own)
    return client


class Node:
    """One Redis server (or one Redis Cluster): the client, its wake-up listener, scripts by name, errors ->
    BackendError."""

    def __init__(
        self,
        client: drv.AnyClient,
        scheme: str,
        secret: str | None,
        label: str,
        socket_timeout: float = 5.0,
        counter: str = lua.NODE_COUNTER,
    ) -> None:
        self.cluster = isinstance(client, drv.ClusterClient)
        # the key of the fence counter (on a cluster: the prefix of the per-slot counters), fixed per store
        bad = lua.check_counter(counter, self.cluster)
        if bad is not None:
            raise ConfigError(bad, backend=scheme)
        self.counter = counter
        self.client = client
        self.scheme = scheme
        self.secret = secret
        self.label = label
        self.socket_timeout = socket_timeout
        self.listener = Listener(client)
        # the hot path: pre-encoded script calls on distlock's own connections (on a cluster, one set of them
        # per master, chosen by the name's slot in redis-py's slot map)
        self.wire = None if isinstance(client, drv.ClusterClient) else Wire.of(client)
        self._wires: dict[str, Wire] = {}
        # the marker of each fence counter as this node showed it to us (one counter per node; per slot on
        # a cluster): a counter found without it later was lost (flushed, evicted, restarted empty)
        self.epochs: dict[str, str] = {}
        # Redlock: the server's run id as last read on a new connection (None: not read yet)
        self.run_id: str | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        scheme: str,
        secret: str | None,
        connect_timeout: float,
        socket_timeout: float,
        label: str,
        cluster: bool = False,
        counter: str = lua.NODE_COUNTER,
        given: object | None = None,
    ) -> Node:
        """A node on a client made from ``url``, or (``given``: the caller's redis-py client or pool, see
        ``connect(client=...)``) on distlock's own client with the given one's connection parameters."""
        client: drv.AnyClient
        if given is not None:
            try:
                client = derive(given, connect_timeout, socket_timeout)
            except ValueError as exc:
                raise ConfigError(str(exc), backend=scheme) from None
            secret = secret or client.connection_pool.connection_kwargs.get("password")
            return cls(client, scheme, secret, label, socket_timeout, counter)
        if cluster and urlsplit(url).path.strip("/") not in ("", "0"):
            raise ConfigError("Redis Cluster has only database 0 (drop /N from the URL)", backend=scheme)
        try:
            if cluster:
                client = await drv.connect_cluster(
                    url, socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout
                )
            else:
                client = drv.connect(url, socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout)
        except (ValueError, TypeError) as exc:
            raise ConfigError(scrub(f"bad Redis URL option: {exc}", secret), backend=scheme) from None
        except RedisError as exc:
            raise BackendError(scrub(f"Redis {label}: cannot connect: {exc}", secret), backend=scheme) from exc
        try:
            return cls(client, scheme, secret, label, socket_timeout, counter)
        except ConfigError:
            await drv.close(client)
            raise

    @property
    def plain_wire(self) -> Wire:
        """The short path of a single server (Redlock masters are never clusters)."""
        assert self.wire is not None
        return self.wire

    async def is_cluster(self) -> bool:
        """Does the server say it is a Redis Cluster node (``INFO cluster``)? False if it may not say."""
        try:
            info = await drv.command(self.client, "INFO", "cluster")
        except RedisError:
            return False
        return isinstance(info, dict) and int(info.get("cluster_enabled", 0)) == 1

    def check_slot(self, name: str) -> None:
        """On a cluster, refuse a name whose keys would not share one hash slot (a ``}`` in the name)."""
        if self.cluster and not same_slot(name):
            raise ConfigError(
                "on Redis Cluster a lock name may not contain '}': its keys {name}:... would not share the "
                "hash slot of the name",
                name=name,
                backend=self.scheme,
            )

    def error(self, exc: BaseException, what: str) -> BackendError:
        return BackendError(scrub(f"Redis {self.label}: {what}: {exc}", self.secret), backend=self.scheme)

    async def load(self) -> None:
        if self.cluster:  # SCRIPT LOAD goes to every master (redis-py routes it to all primaries)
            for text in lua.SCRIPTS.values():
                await drv.command(self.client, "SCRIPT LOAD", text)
            return
        await drv.pipeline(self.client, [("SCRIPT", "LOAD", text) for text in lua.SCRIPTS.values()])

    async def ping(self) -> None:
        try:
            await drv.command(self.client, "PING")
            if self.wire is not None and self.wire.on_connect is not None and self.run_id is None:
                info = await drv.command(self.client, "INFO", "server")
                self.run_id = str(info.get("run_id")) if isinstance(info, dict) else None
            await self.check_server()
            await self.load()
        except RedisError as exc:
            raise self.error(exc, "cannot connect") from exc

    async def check_server(self) -> None:
        """At connect: an eviction policy that may evict the fence counter -> a warning; a server whose script
        cache holds distlock 0.1.0's acquire script (an old client uses it: its per-name fences would go
        below ours) -> ConfigError. A server that refuses CONFIG (managed Redis) is not checked."""
        try:
            policies = _values(await every_master(self.client, "CONFIG GET", "maxmemory-policy"))
        except (RedisError, RedisClusterException) as exc:
            log.debug(
                "Redis %s: CONFIG GET maxmemory-policy refused (%s): eviction policy not checked", self.label, exc
            )
            policies = []
        bad = sorted({p for p in policies if p.startswith("allkeys-")})
        if bad:
            log.warning(
                "Redis %s: maxmemory-policy %s may evict the fence counter, and fences then start again "
                "(set noeviction or a volatile-* policy)",
                self.label,
                bad[0],
            )
        try:
            found = await every_master(self.client, "SCRIPT EXISTS", lua.OLD_ACQUIRE_SHA)
        except (RedisError, RedisClusterException):
            return
        if any(_truthy(x) for x in (found if isinstance(found, list) else [found])):
            raise ConfigError(
                f"Redis {self.label}: a distlock 0.1.0 client has used this server (its script is cached); "
                "0.1.0 counts fences per name and would hand out fences below ours: stop every 0.1.0 client, "
                "then run SCRIPT FLUSH",
                backend=self.scheme,
            )

    def watch_restarts(self) -> None:
        """Redlock: read the run id on every new connection of the short path; a changed run id (the server
        restarted) fails the request that was prepared with the old one (``Restarted``)."""
        self.plain_wire.on_connect = self._on_connect

    async def _on_connect(self, conn: Any, expect: str | None) -> None:
        run = await read_run_id(conn)
        self.run_id = run
        if expect is not None and run != expect:  # the request was prepared with another run's id
            raise Restarted(f"Redis {self.label} restarted (new run id): its fence counter is re-checked")

    def marker(self, name: str) -> str:
        """The marker this node showed us for ``name``'s fence counter ('' before the first acquire)."""
        return self.epochs.get(lua.counter_key(name, self.cluster, self.counter), "")

    def learn(self, name: str, reply: Sequence[Any]) -> None:
        if len(reply) > 2:
            key = lua.counter_key(name, self.cluster, self.counter)
            if key not in self.epochs:
                raw = reply[2]
                self.epochs[key] = raw.decode() if isinstance(raw, bytes) else str(raw)

    def call(self, script: str, name: str, *args: Any) -> tuple[Any, ...]:
        keys = lua.keys(name, self.cluster, self.counter)
        return ("EVALSHA", lua.SHA[script], lua.NKEYS, *keys, lua.channel(name), *args)

    async def run(self, commands: Sequence[Sequence[Any]], what: str) -> list[Any]:
        """Commands in one round trip; reloads the scripts once if the server lost them (restart)."""
        try:
            try:
                return await drv.pipeline(self.client, commands)
            except NoScriptError:
                await self.load()
                return await drv.pipeline(self.client, commands)
        except RedisError as exc:
            raise self.error(exc, what) from exc

    def budget(self, ttl: float) -> float:
        """How long one try of a call about a lease of ``ttl`` may wait for its reply: a third of the TTL
        (at least 50 ms), at most the socket timeout. A try that runs out closes its connection and is sent
        once more on a new one, so one silent (half-open) connection costs a third of a lease, not all."""
        return min(self.socket_timeout, max(0.05, ttl / 3.0))

    async def script(
        self,
        script: str,
        name: str,
        *args: str | int,
        unsure: list[bool] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One script call on ``name`` (one round trip); reloads the scripts once after a restart. ``unsure``
        gets a ``True`` when the call was sent again after a try whose outcome is unknown; ``timeout``
        bounds each try (below the socket timeout)."""
        try:
            try:
                return await self._send(script, name, args, unsure, timeout)
            except NoScriptError:
                await self.load()
                return await self._send(script, name, args, unsure, timeout)
        except RedisError as exc:
            raise self.error(exc, script) from exc

    async def batch(
        self, script: str, calls: Sequence[tuple[str, Sequence[str | int]]], what: str, timeout: float | None
    ) -> list[Any]:
        """The same script on many names in one round trip (renewals), each try bounded by ``timeout``, on
        distlock's own connections (a cluster: redis-py's pipeline, which routes by slot)."""
        if self.wire is None:
            return await self.run([self.call(script, n, *a) for n, a in calls], what)
        packs = [lua.packed_call(script, n, *a, counter=self.counter) for n, a in calls]
        try:
            replies = await self.wire.call_many(packs, None, timeout)
            if any(isinstance(r, NoScriptError) for r in replies):
                await self.load()
                replies = await self.wire.call_many(packs, None, timeout)
        except RedisError as exc:
            raise self.error(exc, what) from exc
        for r in replies:
            if isinstance(r, RedisError):
                raise self.error(r, what) from r
        return replies

    async def _send(
        self,
        script: str,
        name: str,
        args: tuple[str | int, ...],
        unsure: list[bool] | None = None,
        timeout: float | None = None,
    ) -> Any:
        if self.wire is not None:
            return await self.wire.call(lua.packed_call(script, name, *args, counter=self.counter), unsure, timeout)
        assert isinstance(self.client, drv.ClusterClient)
        try:  # straight to the master of the name's slot ...
            key, make = drv.route(self.client, name)
            wire = self._wires.get(key)
            if wire is None:
                wire = self._wires[key] = Wire(make)
            packed = lua.packed_call(script, name, *args, cluster=True, counter=self.counter)
            return await wire.call(packed, unsure, timeout)
        except drv.REROUTE:  # ... unless the slot moved or the master is away: redis-py's routing sorts it out
            if unsure is not None:
                unsure.append(True)
            return await drv.command(self.client, *self.call(script, name, *args))

    async def names(self, prefix: str) -> list[str]:
        """Names with live distlock details whose name starts with ``prefix`` (SCAN, not KEYS)."""
        found: set[str] = set()
        pattern = "{" + lua.glob_escape(prefix) + "*}:i"
        try:  # scan_iter: one SCAN cursor per node (every master of a cluster)
            async for raw in self.client.scan_iter(match=pattern, count=1000):
                key = raw.decode() if isinstance(raw, bytes) else str(raw)
                n = lua.name_of_info_key(key)
                if n is not None and n.startswith(prefix):
                    found.add(n)
        except RedisError as exc:
            raise self.error(exc, "list") from exc
        return sorted(found)

    async def snapshots(self, names: Sequence[str]) -> list[lua.Snapshot]:
        if not names:
            return []
        replies = await self.run([self.call("inspect", n) for n in names], "inspect")
        return [lua.decode_inspect(r) for r in replies]

    async def aclose(self) -> None:
        await self.listener.close()
        for wire in [self.wire, *self._wires.values()]:
            if wire is not None:
                await wire.close()
        await drv.close(self.client)


def _values(reply: Any) -> list[str]:
    """The values of a CONFIG GET reply: a dict, a flat list, or a dict per cluster node."""
    out: list[str] = []
    if isinstance(reply, dict):
        for k, v in reply.items():
            if isinstance(v, (dict, list)):
                out += _values(v)
            else:
                key = k.decode() if isinstance(k, bytes) else str(k)
                if key == "maxmemory-policy":
                    out.append(v.decode() if isinstance(v, bytes) else str(v))
    elif isinstance(reply, list):
        flat = [x.decode() if isinstance(x, bytes) else str(x) for x in reply]
        out += [flat[i + 1] for i in range(0, len(flat) - 1, 2) if flat[i] == "maxmemory-policy"]
    return out


def _truthy(x: Any) -> bool:
    if isinstance(x, (list, tuple)):
        return any(_truthy(y) for y in x)
    if isinstance(x, dict):
        return any(_truthy(y) for y in x.values())
    return bool(int(x)) if isinstance(x, (int, bool)) else str(x) in ("1", "True")


def same_slot(name: str) -> bool:
    """Do all keys of ``name`` hash to one Redis Cluster slot? (Always when the name has no ``}``.)"""
    return "}" not in name or len({key_slot(k.encode()) for k in lua.keys(name, cluster=True)}) == 1


def timeouts(config: StoreConfig) -> tuple[float, float]:
    return config.pop_float("connect_timeout", 5.0), config.pop_float("socket_timeout", 5.0)


def fence_counter(config: StoreConfig) -> str:
    """URL option ``fence_counter``: the key of the store's fence counter (default ``distlock:fences``). Every
    store of one tenant must name the same one (two counters hand out fences independently)."""
    counter = config.pop("fence_counter", lua.NODE_COUNTER)
    assert counter is not None
    bad = lua.check_counter(counter, False)  # braces are refused once the server turns out to be a cluster
    if bad is not None:
        raise ConfigError(bad, backend=config.scheme)
    return counter


class Leases:
    """What a release needs to be idempotent: for each held token, the local end of its last confirmed lease
    (``lease_end`` of the request that confirmed it), and whether a release of it may already have run.

    The rule: a release that finds the token gone (0) is still a success when an earlier try of this
    release may have run on the server (the driver re-sent it after a dropped connection or a timeout, or a
    previous ``release()`` raised) AND the reply came before the local lease end. The server's lease ends no
    earlier than ours, so until then the key could only have gone by our own release (or an admin's
    break_lock or a flush, which remove it just the same): nobody else can have held the name in between.
    After the local lease end the answer stays ``False`` (``LockLost``): the lease may have run out first.
    """

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._unsure: set[str] = set()

    def confirmed(self, claim: Claim, sent: float) -> None:
        self._until[claim.token] = lease_end(sent, claim.ttl)

    def renewed(self, claims: Sequence[Claim], ok: Sequence[bool], sent: float) -> None:
        for c, good in zip(claims, ok, strict=True):
            if good:
                self._until[c.token] = lease_end(sent, c.ttl)
            else:
                self.forget(c.token)

    def unsure(self, token: str) -> None:
        if token in self._until:
            self._unsure.add(token)

    def released(self, token: str, ok: bool, gone: bool, retried: bool = False) -> bool:
        """The answer of a release: ``ok`` = the token held and was removed now; ``gone`` = it is not held
        (any more); ``retried`` = this very call was sent twice."""
        if not ok and gone and (retried or token in self._unsure) and monotonic() < self._until.get(token, 0.0):
            ok = True
        self.forget(token)
        return ok

    def forget(self, token: str) -> None:
        self._until.pop(token, None)
        self._unsure.discard(token)


class Attempt(AsyncAttempt):
    """Try, and between tries wait on the name's wake-up channel.

    No release may fall between a failed try and the wait: the waiter must be registered and the channel
    subscribed BEFORE the try whose failure it waits on. When the channel is already subscribed (another
    waiter, or a recent one: subscriptions linger), registering is local and the first wait blocks at once;
    otherwise the first wait subscribes and returns, so the caller re-checks under the live subscription.
    """

    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self._waker: rt.Waker | None = None
        self._channel = lua.channel(claim.name)
        self._gen: int | None = None  # the subscription generation our last try ran under

    async def try_acquire(self) -> Grant:
        listener = self.backend.node.listener
        self._gen = listener.live(self._channel)
        if self._gen is not None and self._waker is None:
            self._waker = rt.Waker()
            listener.add(self._channel, self.claim.token, self._waker.notify)
        grant = await self.backend._try(self.claim)
        if grant.acquired:
            await self._unwatch()
        return grant

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        listener = self.backend.node.listener
        if self._waker is None or self._gen is None or listener.live(self._channel) != self._gen:
            # not registered and subscribed during the last try: subscribe, then let the caller re-check
            if self._waker is None:
                self._waker = rt.Waker()
            await listener.watch(self._channel, self.claim.token, self._waker.notify, SUBSCRIBE_TIMEOUT)
            if listener.live(self._channel) is not None:
                return
        await self._waker.wait(wait_slice(grant.retry_after, None, timeout, MAX_WAIT_SLICE))

    async def abandon(self) -> None:
        await self._unwatch()
        self.backend.forget(self.claim.token)
        await self.backend.node.script("abandon", self.claim.name, self.claim.token, self.claim.mode.value)

    async def _unwatch(self) -> None:
        if self._waker is not None:
            self._waker = None
            await self.backend.node.listener.unwatch(self._channel, self.claim.token)


def grant_of(reply: Sequence[Any]) -> Grant:
    if int(reply[0]) == 1:
        fence = int(reply[1])
        return Grant(True, fence=fence if fence >= 0 else None)
    left = int(reply[1])
    return Grant(False, retry_after=None if left < 0 else left / 1000.0)


_GIVEN_CLUSTER = (
    "the given redis-py client's server is a Redis Cluster node: give a redis:// URL of it instead "
    "(distlock makes its own cluster client)"
)


def _cluster_option(config: StoreConfig) -> bool | None:
    """``cluster=auto`` (default: ask the seed) -> None; ``true``/``false`` -> forced."""
    raw = config.params.get("cluster")
    if raw is None or raw.lower() == "auto":
        config.params.pop("cluster", None)
        return None
    return config.pop_bool("cluster", False)


class Backend(AsyncBackend):
    capabilities = Capabilities(modes=frozenset(Mode), fair=True, needs_renewal=True)

    def __init__(self, config: StoreConfig, node: Node, wait_replicas: int, wait_timeout_ms: int) -> None:
        super().__init__(config)
        self.node = node
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.leases = Leases()

    @classmethod
    async def open(cls, config: StoreConfig) -> Backend:
        cluster = _cluster_option(config)
        wait_replicas = config.pop_int("wait_replicas", 0)
        if wait_replicas < 0:
            raise ConfigError("wait_replicas must be >= 0", backend=config.scheme)
        wait_timeout = config.pop_int("wait_timeout", 1000)
        if wait_timeout <= 0:
            raise ConfigError("wait_timeout (ms) must be > 0", backend=config.scheme)
        connect_timeout, socket_timeout = timeouts(config)
        counter = fence_counter(config)
        if wait_replicas:
            socket_timeout = max(socket_timeout, wait_timeout / 1000.0 + 1.0)
        url = driver_url(config)
        reject_unknown(config)
        client = given(config)
        if client is not None and cluster:
            raise ConfigError(_GIVEN_CLUSTER, backend=config.scheme)
        args = (url, config.scheme, config.password, connect_timeout, socket_timeout)
        node = await Node.connect(*args, "server", cluster=bool(cluster), counter=counter, given=client)
        try:
            await node.ping()
            if cluster is None and await node.is_cluster():  # auto: a cluster node was given as the seed
                if client is not None:
                    raise ConfigError(_GIVEN_CLUSTER, backend=config.scheme)
                await node.aclose()
                node = await Node.connect(*args, "cluster", cluster=True, counter=counter)
                await node.ping()
            if node.cluster and wait_replicas:
                raise ConfigError(
                    "wait_replicas is not supported on Redis Cluster (WAIT would run on another connection "
                    "than the acquire)",
                    backend=config.scheme,
                )
        except BaseException:
            await node.aclose()
            raise
        return cls(config, node, wait_replicas, wait_timeout)

    def attempt(self, claim: Claim) -> Attempt:
        self.node.check_slot(claim.name)
        return Attempt(self, claim)

    def forget(self, token: str) -> None:
        self.leases.forget(token)

    async def _try(self, claim: Claim) -> Grant:
        node = self.node
        args = lua.acquire_args(
            claim.token,
            claim.mode,
            claim.ttl,
            claim.permits,
            claim.fair,
            claim.owner,
            WAITER_TTL,
            node.marker(claim.name),
        )
        sent = monotonic()
        if not self.wait_replicas:
            reply = await node.script("acquire", claim.name, *args, timeout=node.budget(claim.ttl))
            node.learn(claim.name, reply)
            grant = grant_of(reply)
            if grant.acquired:
                self.leases.confirmed(claim, sent)
            return grant
        call = node.call("acquire", claim.name, *args)
        reply, acks = await node.run([call, ("WAIT", self.wait_replicas, self.wait_timeout_ms)], "acquire")
        node.learn(claim.name, reply)
        grant = grant_of(reply)
        if grant.acquired:
            self.leases.confirmed(claim, sent)
        if grant.acquired and int(acks) < self.wait_replicas:
            await self.node.script("release", claim.name, claim.token, claim.mode.value)
            raise BackendError(
                f"only {int(acks)} of {self.wait_replicas} replicas acknowledged the lock within "
                f"{self.wait_timeout_ms} ms; released it (wait_replicas)",
                name=claim.name,
                backend=self.scheme,
            )
        return grant

    async def release(self, claim: Claim) -> bool:
        unsure: list[bool] = []
        try:
            reply = await self.node.script(
                "release", claim.name, claim.token, claim.mode.value, unsure=unsure, timeout=self.node.budget(claim.ttl)
            )
        except BackendError:
            self.leases.unsure(claim.token)
            raise
        return self.leases.released(claim.token, int(reply) == 1, True, bool(unsure))

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        if not claims:
            return []
        calls = [(c.name, (c.token, c.mode.value, lua.ms(c.ttl))) for c in claims]
        sent = monotonic()
        budget = self.node.budget(min(c.ttl for c in claims))
        out = [int(r) == 1 for r in await self.node.batch("renew", calls, "renew", budget)]
        self.leases.renewed(claims, out, sent)
        return out

    async def holds(self, claim: Claim) -> bool:
        return int(await self.node.script("holds", claim.name, claim.token, claim.mode.value)) == 1

    async def inspect(self, name: str) -> LockInfo | None:
        self.node.check_slot(name)
        (snap,) = await self.node.snapshots([name])
        return snap.info(name)

    async def list(self, prefix: str) -> list[LockInfo]:
        names = await self.node.names(prefix)
        infos = [s.info(n) for n, s in zip(names, await self.node.snapshots(names), strict=True)]
        return [i for i in infos if i is not None]

    async def break_lock(self, name: str) -> bool:
        self.node.check_slot(name)
        tokens = await self.node.script("break", name)
        for raw in tokens:
            token = raw.decode() if isinstance(raw, bytes) else str(raw)
            self.leases.forget(token)
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

    async def aclose(self) -> None:
        await self.node.aclose()
