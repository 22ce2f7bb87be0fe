"""etcd v3 backend (``etcd://h1:2379,h2:2379``, ``etcds://`` for TLS): the layout of etcd's Go Mutex.

Wire layout and grant rule: :mod:`distlock._core.etcd_keys`. In short, a contender is the key
``NAME/<lease hex>`` (empty value) attached to its own lease; the smallest create revision holds; a waiter
watches only the key just ahead of it; the fence is the create revision of the holder's key. So an
``etcdctl lock NAME`` or a Go ``concurrency.Mutex`` on the same name and a distlock lock exclude each other.

Driver: the etcd v3 JSON gateway (grpc-gateway, served by every etcd on its client port) over a small
HTTP/1.1 client (``_etcd_http.py``; the sockets are ``_etcd_async`` / ``_etcd_sync``). python-etcd3 is
unmaintained and breaks with current protobuf; the gateway needs no generated code and speaks the same API
as gRPC.

Leases (F14 in docs/safety.md): every claim gets a lease of its own, so two lock objects of one process never share
one. Leases are pooled: a released claim's lease goes back to a small pool and the next claim with the same
TTL reuses it if enough of it is left, which saves the grant and revoke writes of the uncontended path.
The store's renewer keeps all held leases alive with one keepalive stream request per tick (a batch of
lease ids), plus one read-only txn that checks the keys are still there (an admin ``etcdctl del`` is seen).
A waiter keeps its own queue entry's lease alive while it waits.

Failure handling: every request has a bounded time; a refused connection or an unavailable member moves to
the next endpoint of the URL; past the op timeout the call raises ``BackendError``. A timed-out, cancelled or
failed acquire deletes its key (and keeps the lease for reuse) when it knows the key, and otherwise revokes
its lease, which deletes its key even if the create's reply was lost (F10). After
every wake-up the waiter re-reads the queue and requires its own key to still be there (etcd#11456, F6);
if its lease was revoked from outside meanwhile, it queues again at the back with a fresh lease.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import _rt_async as rt
from ..._core import etcd_keys as keys
from ..._core.timing import drift_margin, monotonic
from ..._core.types import Capabilities, Claim, Grant, HolderInfo, LockInfo, Mode
from ..._errors import BackendError, ConfigError, NotHeld, UnsupportedFeature
from ..._url import StoreConfig, scrub
from ..backend import AsyncAttempt, AsyncBackend
from ._etcd_http import HTTPClient, Member

if TYPE_CHECKING:
    from ..locks import AsyncLock

log = logging.getLogger("distlock")

#: gRPC codes the gateway reports for a member that cannot serve now (no leader, leader changed, timeout)
_RETRY_CODES = {4, 8, 14}
_NOT_FOUND = 5
_PERMISSION_DENIED = 7
#: per-try limit of the renewal requests (keepalive, key check): they must fail over well within a lease
_FAST_TRY = 0.5
#: ops per txn (etcd refuses more than --max-txn-ops, 128 by default)
_MAX_TXN_OPS = 100
#: free leases kept per TTL for reuse
_POOL_SIZE = 8
#: budget of the clean-up after a failed acquire (what it leaves goes with its lease's TTL)
_CLEANUP = 2.0


@dataclass
class _Lease:
    id: int
    ttl: int  # what the server granted (it raises tiny TTLs to its minimum)
    confirmed: float  # monotonic time the last grant/keepalive was *sent*: the lease runs at least until + ttl

    def left(self, now: float) -> float:
        return self.confirmed + self.ttl - now

    def end(self) -> float:
        """The local end of this lease: no later than the server's, by the drift margin."""
        return self.confirmed + self.ttl - drift_margin(self.ttl)

    def confirm(self, sent: float, ttl: int) -> None:
        """A keepalive sent at ``sent`` was answered with ``ttl`` (> 0)."""
        self.confirmed = max(self.confirmed, sent)
        self.ttl = min(self.ttl, ttl)  # the server's word, in case it ever answers less than it granted


@dataclass
class _Entry:
    """One claim's key in the queue (waiting or holding)."""

    name: str
    key: bytes
    rev: int
    lease: _Lease
    owner_value: bytes
    token: str = ""
    releasing: bool = False


@dataclass(frozen=True)
class EtcdGuard:
    """The condition "this holding is still the one that holds the lock", for your own etcd transactions.

    ``compare()`` is the JSON gateway form (``{"compare": [guard.compare()], "success": [...]}`` on
    ``/v3/kv/txn``); ``etcdctl()`` the ``etcdctl txn`` form; with a gRPC client use
    ``CreateRevision(key) == create_revision``. The write happens only while the lock key still exists
    with this create revision, i.e. while this holding has not been released, lost or broken.
    """

    key: bytes
    create_revision: int

    def compare(self) -> dict[str, object]:
        return keys.create_is(self.key, self.create_revision)

    def etcdctl(self) -> str:
        return f'c("{self.key.decode("utf-8", "backslashreplace")}") = "{self.create_revision}"'


def guard(lock: AsyncLock) -> EtcdGuard:
    """The :class:`EtcdGuard` of the calling owner's current holding of ``lock`` (an etcd store's lock)."""
    backend = lock._store._backend
    if not isinstance(backend, Backend):
        raise UnsupportedFeature("guard() needs a lock of an etcd store", name=lock.name, backend=backend.scheme)
    fence = lock.fence
    if fence is None:
        raise NotHeld("guard() of a lock this owner does not hold", name=lock.name, backend=backend.scheme)
    return backend._guard_for(lock.name, fence)


class _Denied(BackendError):
    """etcd refused a request for lack of permission (the user's roles do not cover the key)."""


def _denied(exc: _Denied, name: str | None, user: str | None, what: str) -> BackendError:
    """The one-line error of a request etcd refused for lack of permission, naming the lock."""
    who = f"user {user!r}" if user else "this client"
    return BackendError(f"etcd: permission denied: {who} may not {what}", name=name, backend=exc.backend)


class _Gateway:
    """Requests to the JSON gateway with failover across endpoints, bounded time and token auth."""

    def __init__(
        self,
        scheme: str,
        bases: list[Member],
        client: HTTPClient,
        op_timeout: float,
        connect_timeout: float,
        try_timeout: float,
        username: str | None,
        password: str | None,
    ) -> None:
        self.scheme = scheme
        self.try_timeout = try_timeout
        self.bases = bases
        self.client = client
        self.op_timeout = op_timeout
        self.connect_timeout = connect_timeout
        self._username = username
        self._password = password
        self._token: str | None = None
        self._current = 0

    @property
    def username(self) -> str | None:
        return self._username

    @property
    def base(self) -> Member:
        return self.bases[self._current % len(self.bases)]

    def _rotate(self, failed: Member) -> None:
        if self.base == failed:
            self._current = (self._current + 1) % len(self.bases)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._token} if self._token else {}

    def _error(self, message: str) -> BackendError:
        return BackendError(f"etcd: {scrub(message, self._password, self._token)}", backend=self.scheme)

    async def authenticate(self) -> None:
        if self._username is None:
            return
        body = {"name": self._username, "password": self._password or ""}
        self._token = None
        data = await self.call("/v3/auth/authenticate", body, reauth=False)
        token = data.get("token")
        if not isinstance(token, str) or not token:
            raise self._error("authentication returned no token")
        self._token = token

    async def ping(self) -> None:
        """Check at connect that the cluster answers and has a leader, without touching any key: the status
        endpoint needs no permission (a user whose role covers only its own prefix may connect), and the
        token was checked by the authentication just before. A member without a leader is asked again or
        the next one is, until the op timeout."""
        deadline = monotonic() + self.op_timeout
        while True:
            data = await self.call("/v3/maintenance/status", {}, op_timeout=max(0.05, deadline - monotonic()))
            if str(data.get("leader") or "0") != "0":
                return
            if monotonic() >= deadline:
                raise self._error(f"no leader within {self.op_timeout}s")
            self._rotate(self.base)
            await rt.sleep(0.1)

    async def call(
        self,
        path: str,
        body: dict[str, Any] | str,
        *,
        ok_codes: tuple[int, ...] = (),
        reauth: bool = True,
        try_timeout: float | None = None,
        op_timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST ``body`` to ``path``; the decoded answer. Errors with a code in ``ok_codes`` are returned."""
        op_timeout = self.op_timeout if op_timeout is None else op_timeout
        deadline = monotonic() + op_timeout
        tries = 0
        last = "no endpoint answered"
        payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        cause: BaseException | None = None
        while True:
            base = self.base
            left = max(0.05, deadline - monotonic())
            # A member whose leader just died holds a proposal until its own ~6 s timeout; a short per-try
            # limit sends the retry to a member that can serve (every request here is safe to repeat).
            limit = self.try_timeout if try_timeout is None else try_timeout
            connect = self.connect_timeout if try_timeout is None else min(try_timeout, self.connect_timeout)
            try:
                resp = await self.client.post(
                    base, path, payload, self._headers(), timeout=min(left, limit), connect_timeout=min(left, connect)
                )
            except OSError as exc:  # refused, reset, timed out, TLS failure: try the next member
                last, cause = f"{type(exc).__name__} from {_label(base)}", exc
                self._rotate(base)
            else:
                data = _decode(resp.body)
                if resp.status == 200 and "error" not in data:
                    return data
                code = int(data.get("code") or 0)
                message = str(data.get("error") or data.get("message") or f"HTTP {resp.status}")
                if code in ok_codes:
                    return data
                if reauth and self._username is not None and ("auth token" in message or code == 16):
                    reauth = False
                    await self.authenticate()
                    continue
                if code not in _RETRY_CODES and resp.status < 500:
                    if "authentication failed" in message:
                        raise self._error("authentication failed (wrong user name or password)")
                    if code == _PERMISSION_DENIED or "permission denied" in message:
                        raise _Denied(f"etcd: {path}: permission denied", backend=self.scheme)
                    if "user name is empty" in message:
                        raise self._error("the server has authentication on: put user:password in the URL")
                    raise self._error(f"{path}: {message}")
                last, cause = message, None
                self._rotate(base)
            tries += 1
            if monotonic() >= deadline:
                raise self._error(f"no answer within {op_timeout}s ({last})") from cause
            if tries % len(self.bases) == 0:
                await rt.sleep(min(0.2, 0.02 * tries))

    async def keepalive(self, ids: Sequence[int], op_timeout: float | None = None) -> dict[int, int]:
        """One request for many leases (the gateway streams one answer per id): id -> TTL (0: gone).

        The answer confirms the leases from the moment the *first* try was sent, which is no later than the
        try the server answered: a caller that counts from its own send time never outlives the server."""
        if not ids:
            return {}
        body = "\n".join(json.dumps({"ID": str(i)}) for i in ids)
        op_timeout = self.op_timeout if op_timeout is None else op_timeout
        deadline = monotonic() + op_timeout
        while True:
            # a healthy leader answers keepalives in milliseconds: give up on a member sooner than usual
            left = max(0.05, deadline - monotonic())
            data = await self.call("/v3/lease/keepalive", body, try_timeout=_FAST_TRY, op_timeout=left)
            out: dict[int, int] = {}
            failed = ""
            for msg in data.get("_messages", [data]):
                result = msg.get("result")
                if isinstance(result, dict) and "ID" in result:
                    out[int(result["ID"])] = int(result.get("TTL") or 0)
                else:  # an error inside the stream (no leader right now): not an answer about the lease
                    failed = str(msg.get("error", msg))[:200]
            if not failed and len(out) == len(ids):
                return out
            if monotonic() >= deadline:
                raise self._error(f"lease keepalive failed: {failed or 'incomplete answer'}")
            self._rotate(self.base)
            await rt.sleep(0.05)

    async def txn_each(self, ops: Sequence[dict[str, Any]], try_timeout: float | None = None) -> list[Any]:
        """Run independent ops (ranges, deletes) in as few txns as etcd allows (``--max-txn-ops``, 128 by
        default); the responses in order."""
        out: list[Any] = []
        for i in range(0, len(ops), _MAX_TXN_OPS):
            data = await self.call("/v3/kv/txn", {"success": list(ops[i : i + _MAX_TXN_OPS])}, try_timeout=try_timeout)
            out.extend(data.get("responses") or [])
        return out

    async def revoke(self, lease: int, op_timeout: float | None = None) -> bool:
        """Revoke a lease (deleting its keys); an unknown lease is fine. Best effort: False if it failed."""
        try:
            await self.call("/v3/lease/revoke", {"ID": str(lease)}, ok_codes=(_NOT_FOUND,), op_timeout=op_timeout)
        except BackendError:
            return False  # it expires by its TTL
        return True

    async def watch_delete(
        self, key: bytes, end: bytes | None, since: int, targets: dict[bytes, int], timeout: float
    ) -> tuple[Member, int] | None:
        """Return when one of ``targets`` (key -> create revision, keys in [key, end)) is deleted, after
        ``timeout`` seconds, or at once on a stream error (the caller re-checks in every case).

        ``since`` is the revision after the read the caller decided on. The watch starts at the current
        revision (a watch asked to start in the past is served by etcd's catch-up loop, up to 100 ms
        late); if anything was written since that read, the targets are read once more after the watch
        exists, so a delete in between is seen either by that read or by the watch.

        Returns the member and the revision of the DELETE event it reported, when that is why it returned
        (the member has applied that revision: the caller's re-check can read there, see ``read_at``).
        """
        create: dict[str, object] = {"key": keys.b64(key), "filters": ["NOPUT"]}
        if end is not None:
            create["range_end"] = keys.b64(end)
        deadline = monotonic() + timeout
        base = self.base
        body = json.dumps({"create_request": create}).encode()
        try:
            async with self.client.stream(
                base,
                "/v3/watch",
                body,
                self._headers(),
                timeout=max(0.01, timeout),
                connect_timeout=min(timeout + 0.01, self.connect_timeout),
            ) as resp:
                if resp.status != 200:
                    self._rotate(base)
                    await rt.sleep(0.05)
                    return None
                async for line in resp.lines():
                    if not line.strip():
                        continue
                    msg = _decode(line)
                    result = msg.get("result")
                    if not isinstance(result, dict) or result.get("canceled") or result.get("compact_revision"):
                        return None
                    if result.get("created"):
                        started_at = int((result.get("header") or {}).get("revision") or 0)
                        if started_at >= since and await self._any_gone(key, end, targets):
                            return None
                    for ev in result.get("events") or []:
                        kv = ev.get("kv") or {}
                        if ev.get("type") == "DELETE" and keys.unb64(kv.get("key")) in targets:
                            seen = int((result.get("header") or {}).get("revision") or 0)
                            return base, max(seen, int(kv.get("mod_revision") or 0))
                    if monotonic() >= deadline:
                        return None
        except TimeoutError:
            return None
        except OSError:
            self._rotate(base)
            await rt.sleep(0.05)
        return None

    async def read_at(self, member: Member, body: dict[str, Any]) -> dict[str, Any] | None:
        """One try of a read at one member (no failover); None if it failed."""
        try:
            resp = await self.client.post(
                member,
                "/v3/kv/range",
                json.dumps(body).encode(),
                self._headers(),
                timeout=min(self.try_timeout, self.op_timeout),
                connect_timeout=min(self.try_timeout, self.connect_timeout),
            )
        except OSError:
            return None
        data = _decode(resp.body)
        return data if resp.status == 200 and "error" not in data else None

    async def _any_gone(self, key: bytes, end: bytes | None, targets: dict[bytes, int]) -> bool:
        data = await self.call("/v3/kv/range", keys.range_op(key, end))
        present = {(keys.unb64(kv.get("key")), int(kv.get("create_revision") or 0)) for kv in data.get("kvs") or []}
        return any((k, rev) not in present for k, rev in targets.items())


def _label(member: Member) -> str:
    return f"[{member[0]}]:{member[1]}" if ":" in member[0] else f"{member[0]}:{member[1]}"


def _decode(text: bytes) -> dict[str, Any]:
    """A gateway answer: one JSON object, or several (a streamed keepalive) gathered under ``_messages``."""
    text = text.strip()
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        msgs = []
        for line in text.splitlines():
            line = line.strip()
            if line:
                try:
                    msgs.append(json.loads(line))
                except ValueError:
                    return {"error": "unreadable answer from the etcd gateway"}
        return {"_messages": msgs}
    return data if isinstance(data, dict) else {"error": "unexpected answer from the etcd gateway"}


class Attempt(AsyncAttempt):
    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self._prefix = keys.lock_prefix(claim.name)
        self._lease: _Lease | None = None
        self._entry: _Entry | None = None
        self._watch: tuple[keys.Contender, ...] = ()
        self._since = 0
        self._woke: tuple[Member, int] | None = None  # where and at which revision the watch saw the delete
        self._granted = False  # the backend adopted our key as a holding
        self._deadline: float | None = None  # the acquire's deadline, learned from wait()
        self._try_end = 0.0  # the current try's end: its start + the op timeout, or the deadline if sooner

    def _budget(self) -> float:
        """How long the next call of this try may take: what is left of the try (at least a moment)."""
        return max(0.01, self._try_end - monotonic())

    async def try_acquire(self) -> Grant:
        """One try, bounded as a whole by the op timeout (``timeout=`` in the URL), and by the acquire's
        deadline once wait() told it: a try that runs into the deadline is a plain "not yet"."""
        self._try_end = monotonic() + self.backend.gw.op_timeout
        if self._deadline is not None:
            self._try_end = min(self._try_end, self._deadline)
        try:
            return await self._try()
        except _Denied as exc:
            what = f"write {self._prefix.decode('utf-8', 'replace')!r}"
            raise _denied(exc, self.claim.name, self.backend.gw.username, what) from None
        except BackendError:
            if self._deadline is not None and monotonic() >= self._deadline:
                return Grant(False)  # ran into the acquire's deadline: the store abandons the attempt
            raise

    async def _try(self) -> Grant:
        started = monotonic()
        claim = self.claim
        if self._entry is None:
            entry, header_rev, queue = await self._enqueue()
        else:
            entry = self._entry
            data = await self._reread()
            header_rev = int(data["header"]["revision"])
            queue = keys.contenders(self._prefix, data.get("kvs") or [])
            if not any(c.key == entry.key and c.rev == entry.rev for c in queue):
                # Our own key is gone (lease revoked or expired while we waited): never act on the old
                # place in the queue (etcd#11456); queue again at the back with a fresh lease.
                await self._drop()
                entry, header_rev, queue = await self._enqueue()
        decision = keys.decide(queue, entry.rev, claim.mode, claim.permits)
        if decision.acquired:
            entry.token = claim.token
            self.backend._adopt(entry)
            self._granted = True
            self._entry = None
            self._lease = None
            return Grant(True, fence=entry.rev, valid_for=max(0.0, min(claim.ttl, entry.lease.left(started))))
        self._watch = decision.watch
        self._since = header_rev + 1
        return Grant(False)

    async def _reread(self) -> dict[str, Any]:
        """The queue after a wake-up (the F6 re-check of our own key is made on it).

        Woken by a watch event, the queue is read where the event came from, ``serializable`` (no quorum
        round), and used only if that member is at least at the event's revision: the state it shows is
        then the cluster's state at a revision committed after our key was created and after the watch
        began, which is what a linearizable read taken then would show. It cannot miss a revocation of
        our own lease that came before the predecessor's delete (events apply in revision order).
        Otherwise (timed out, stream error, member behind): a linearizable read with failover.
        """
        woke, self._woke = self._woke, None
        gw = self.backend.gw
        if woke is not None:
            member, rev = woke
            data = await gw.read_at(member, {**keys.prefix_range(self._prefix), "serializable": True})
            if data is not None and int((data.get("header") or {}).get("revision") or 0) >= rev > 0:
                return data
        return await gw.call("/v3/kv/range", keys.prefix_range(self._prefix), op_timeout=self._budget())

    async def _enqueue(self) -> tuple[_Entry, int, list[keys.Contender]]:
        """Create our key (put-if-absent on our own lease) and read the queue, in one txn."""
        claim = self.claim
        value = keys.owner_value(claim.owner, claim.mode, claim.permits)
        queue_range = {"request_range": keys.prefix_range(self._prefix)}
        fresh = False
        while True:
            if self._lease is None:
                self._lease = await self.backend._take_lease(claim.ttl, fresh=fresh, op_timeout=self._budget())
            lease = self._lease
            key = keys.lock_key(claim.name, claim.mode, lease.id)
            data = await self.backend.gw.call(
                "/v3/kv/txn",
                {
                    "compare": [keys.create_is(key, 0)],
                    "success": [keys.put_op(key, value, lease.id), queue_range],
                    # the key exists already: a retried create whose first reply was lost (F8); it is ours
                    "failure": [{"request_range": keys.range_op(key)}, queue_range],
                },
                ok_codes=() if fresh else (_NOT_FOUND,),
                op_timeout=self._budget(),
            )
            if int(data.get("code") or 0) != _NOT_FOUND:
                break
            # "requested lease not found": a pooled lease revoked from outside; nothing was written
            self._lease, fresh = None, True
        header_rev = int(data["header"]["revision"])
        responses = data.get("responses") or []
        if data.get("succeeded"):
            rev = header_rev
        else:
            rev = int(keys.kvs_of(responses[0])[0]["create_revision"])
        entry = _Entry(claim.name, key, rev, lease, value)
        self._entry = entry
        return entry, header_rev, keys.contenders(self._prefix, keys.kvs_of(responses[-1]))

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        # the store passes what is left of the acquire's timeout: later calls of this attempt stop there
        self._deadline = None if timeout is None else monotonic() + timeout
        entry = self._entry
        if entry is None or not self._watch:
            await rt.sleep(0.01)
            return
        gw = self.backend.gw
        lease = entry.lease
        # keep our place in the queue: a waiter's lease is kept alive by the waiter (holders' by the renewer)
        if monotonic() >= lease.confirmed + lease.ttl / 3.0:
            sent = monotonic()
            limit = gw.op_timeout if timeout is None else max(0.01, min(gw.op_timeout, timeout))
            try:
                ttl = (await gw.keepalive([lease.id], op_timeout=limit)).get(lease.id, 0)
            except BackendError:
                if self._deadline is not None and monotonic() >= self._deadline:
                    return  # the store sees the deadline passed and abandons the attempt
                raise
            if ttl <= 0:
                return  # gone: the next try sees our key missing and queues again
            lease.confirm(sent, ttl)
        slice_ = max(0.05, lease.confirmed + lease.ttl / 3.0 - monotonic())
        if timeout is not None:
            slice_ = min(slice_, max(0.0, timeout))
        if slice_ <= 0:
            return
        targets = {c.key: c.rev for c in self._watch}
        if len(self._watch) == 1:
            self._woke = await gw.watch_delete(self._watch[0].key, None, self._since, targets, slice_)
        else:
            self._woke = await gw.watch_delete(
                self._prefix, keys.prefix_end(self._prefix), self._since, targets, slice_
            )

    async def abandon(self) -> None:
        """Bounded by its own budget (``_CLEANUP``, at most the op timeout): on a silent link, what is left
        goes with the lease, which nobody keeps alive any more (it is never given back to the pool)."""
        budget = min(_CLEANUP, self.backend.gw.op_timeout)
        end = monotonic() + budget
        if self._granted:
            # Granted, but the caller never took the holding (cancelled as the grant came back): release it
            # like any holding, or it would block the name until its lease ran out (F10).
            self._granted = False
            try:
                await self.backend._release(self.claim, budget)
            except BackendError as exc:
                log.warning("clean-up of a grant nobody took (%r) left to its lease: %s", self.claim.name, exc)
            return
        entry = self._entry
        lease = entry.lease if entry is not None else self._lease
        self._entry = None
        self._lease = None
        if lease is None:
            return
        if entry is not None:
            # We know our key (the create's reply arrived): delete it and keep the lease for the next claim.
            try:
                data = await self.backend.gw.call(
                    "/v3/kv/txn",
                    {"compare": [keys.create_is(entry.key, entry.rev)], "success": [keys.delete_op(entry.key)]},
                    op_timeout=budget,
                )
            except BackendError:
                data = {}
            if data.get("succeeded"):
                self.backend._give_back(lease)
                return
        # Revoking deletes our key even if the create's reply never reached us (F10).
        if not await self.backend.gw.revoke(lease.id, op_timeout=max(0.05, end - monotonic())):
            log.warning("clean-up of an abandoned acquire of %r left to its lease's TTL", self.claim.name)

    async def _drop(self) -> None:
        """Our key is gone from the queue: revoke the lease it was on (it may be dead already)."""
        lease = self._entry.lease if self._entry is not None else self._lease
        self._entry = None
        self._lease = None
        if lease is not None:
            await self.backend.gw.revoke(lease.id)


class Backend(AsyncBackend):
    capabilities = Capabilities(modes=frozenset(Mode), fair=True, always_fair=True, needs_renewal=True)

    def __init__(self, config: StoreConfig, gw: _Gateway) -> None:
        super().__init__(config)
        self.gw = gw
        self._guard = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._pool: dict[int, list[_Lease]] = {}
        self._stale: list[int] = []  # lease ids dropped from the pool, to revoke
        self._released: dict[str, None] = {}  # tokens released lately, oldest first

    @classmethod
    async def open(cls, config: StoreConfig) -> Backend:
        op_timeout = config.pop_float("timeout", 5.0)
        connect_timeout = config.pop_float("connect_timeout", 2.0)
        try_timeout = config.pop_float("try_timeout", 1.0)
        cafile = config.pop("cafile")
        certfile = config.pop("certfile")
        keyfile = config.pop("keyfile")
        config.reject_unknown()
        tls: ssl.SSLContext | None = None
        if config.tls:
            try:
                ctx = ssl.create_default_context(cafile=cafile)
                if certfile:
                    ctx.load_cert_chain(certfile, keyfile)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"etcds:// TLS files: {exc}", backend=config.scheme) from exc
            tls = ctx
        elif cafile or certfile or keyfile:
            raise ConfigError("cafile/certfile/keyfile need an etcds:// URL", backend=config.scheme)
        bases: list[Member] = [(h.strip("[]"), int(p)) for h, p in config.hosts]
        client = HTTPClient(tls)  # connects to the members directly: never through a proxy from the environment
        gw = _Gateway(
            config.scheme, bases, client, op_timeout, connect_timeout, try_timeout, config.username, config.password
        )
        try:
            await gw.authenticate()
            await gw.ping()
        except BaseException:
            await client.aclose()
            raise
        return cls(config, gw)

    def attempt(self, claim: Claim) -> Attempt:
        return Attempt(self, claim)

    # -- leases ----------------------------------------------------------------------------------------
    async def _take_lease(self, ttl: float, fresh: bool = False, op_timeout: float | None = None) -> _Lease:
        want = keys.lease_ttl_seconds(ttl)
        now = monotonic()
        enough = max(ttl * 2.0 / 3.0, 0.5)
        refresh: _Lease | None = None
        with self._guard:
            pool = self._pool.get(want, [])
            while pool and not fresh:
                lease = pool.pop()
                if lease.left(now) >= enough:
                    return lease
                if lease.left(now) >= 1.0:
                    refresh = lease  # alive but aged (nothing held kept it alive): one keepalive renews it
                    break
                self._stale.append(lease.id)  # about to expire: revoked by the next renewal tick or close()
        if refresh is not None:
            # a keepalive is answered by the leader without a raft write, unlike a grant (and the revoke of
            # the old lease it would need)
            sent = monotonic()
            ttl_left = (await self.gw.keepalive([refresh.id], op_timeout=op_timeout)).get(refresh.id, 0)
            if ttl_left > 0:
                refresh.confirm(sent, ttl_left)
                return refresh
        sent = monotonic()
        data = await self.gw.call("/v3/lease/grant", {"TTL": str(want)}, op_timeout=op_timeout)
        return _Lease(int(data["ID"]), int(data.get("TTL") or want), sent)

    def _give_back(self, lease: _Lease) -> None:
        want = lease.ttl
        with self._guard:
            pool = self._pool.setdefault(want, [])
            if len(pool) < _POOL_SIZE:
                pool.append(lease)
                return
            self._stale.append(lease.id)  # a full pool: revoked off the acquire/release path

    async def _revoke_stale(self) -> None:
        """Revoke the leases dropped from the pool (they hold no key; revoking beats waiting for the TTL)."""
        with self._guard:
            stale, self._stale = self._stale, []
        for lease in stale:
            await self.gw.revoke(lease, op_timeout=min(1.0, self.gw.op_timeout))

    def _adopt(self, entry: _Entry) -> None:
        with self._guard:
            self._entries[entry.token] = entry

    def _entry(self, claim: Claim) -> _Entry | None:
        with self._guard:
            return self._entries.get(claim.token)

    def _guard_for(self, name: str, fence: int) -> EtcdGuard:
        with self._guard:
            for e in self._entries.values():
                if e.name == name and e.rev == fence:
                    return EtcdGuard(e.key, e.rev)
        raise NotHeld("no current holding with this fence", name=name, backend=self.scheme)

    async def _relet(self, entry: _Entry, ttl: float) -> None:
        """Move a held key to a new, longer lease (``extend(ttl=...)`` beyond the lease's TTL).

        A put on an existing key keeps its create revision, so the fence and the queue place stay.
        """
        new = await self._take_lease(ttl)
        old = entry.lease
        data = await self.gw.call(
            "/v3/kv/txn",
            {
                "compare": [keys.create_is(entry.key, entry.rev)],
                "success": [keys.put_op(entry.key, entry.owner_value, new.id)],
            },
        )
        if data.get("succeeded"):
            entry.lease = new
            await self.gw.revoke(old.id)
        else:
            await self.gw.revoke(new.id)

    # -- the backend interface -------------------------------------------------------------------------
    def lease_end(self, claim: Claim) -> float | None:
        """The local end of the holding's own etcd lease: the send time of its last confirmed keepalive (or
        grant) + the TTL the server granted - the drift margin. Tighter than the store's own count when a
        pooled lease was confirmed before the acquire started."""
        entry = self._entry(claim)
        return None if entry is None else entry.lease.end()

    async def release(self, claim: Claim) -> bool:
        return await self._release(claim, None)

    async def _release(self, claim: Claim, op_timeout: float | None) -> bool:
        with self._guard:
            entry = self._entries.get(claim.token)
            if entry is None:
                return False
            entry.releasing = True  # a renewal racing with this release must not report the holding lost
        try:
            data = await self.gw.call(
                "/v3/kv/txn",
                {"compare": [keys.create_is(entry.key, entry.rev)], "success": [keys.delete_op(entry.key)]},
                op_timeout=op_timeout,
            )
        finally:
            with self._guard:
                self._entries.pop(claim.token, None)
                # a renewal tick that picked this holding before the release finished must not call it lost
                self._released[claim.token] = None
                if len(self._released) > 256:
                    del self._released[next(iter(self._released))]
        if data.get("succeeded"):
            self._give_back(entry.lease)
            return True
        await self.gw.revoke(entry.lease.id, op_timeout=op_timeout)
        return False

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        with self._guard:
            released = [c.token in self._released for c in claims]
        entries = [self._entry(c) for c in claims]
        for c, e in zip(claims, entries, strict=True):
            if e is not None and keys.lease_ttl_seconds(c.ttl) > e.lease.ttl:
                await self._relet(e, c.ttl)
        live = [e for e in entries if e is not None]
        if not live:
            return released
        with self._guard:  # free leases in the pool ride along, so they stay fresh for the next acquire
            pooled = [lease for pool in self._pool.values() for lease in pool]
        sent = monotonic()
        ttls = await self.gw.keepalive(sorted({e.lease.id for e in live} | {lease.id for lease in pooled}))
        dead = set()
        for lease in pooled:
            if ttls.get(lease.id, 0) > 0:
                lease.confirm(sent, ttls[lease.id])
            else:
                dead.add(lease.id)
        if dead:
            with self._guard:
                for pool in self._pool.values():
                    pool[:] = [lease for lease in pool if lease.id not in dead]
        checks = [{"request_range": keys.range_op(e.key)} for e in live]
        present: set[tuple[bytes, int]] = set()
        for r in await self.gw.txn_each(checks, try_timeout=_FAST_TRY):
            for kv in keys.kvs_of(r):
                present.add((keys.unb64(kv.get("key")), int(kv.get("create_revision") or 0)))
        out = []
        for e, gone in zip(entries, released, strict=True):
            ok = e is not None and (e.releasing or (ttls.get(e.lease.id, 0) > 0 and (e.key, e.rev) in present))
            if ok and e is not None and ttls.get(e.lease.id, 0) > 0:
                e.lease.confirm(sent, ttls[e.lease.id])
            out.append(ok or gone)
        await self._revoke_stale()
        return out

    async def holds(self, claim: Claim) -> bool:
        entry = self._entry(claim)
        if entry is None:
            return False
        data = await self.gw.call("/v3/kv/range", keys.range_op(entry.key))
        return any(int(kv.get("create_revision") or 0) == entry.rev for kv in data.get("kvs") or [])

    async def _snapshot(self, name: str) -> tuple[list[keys.Contender], list[keys.Contender], dict[bytes, str]]:
        """(queue, holders, key -> owner id) of one name: one range read of ``NAME/`` with the values."""
        prefix = keys.lock_prefix(name)
        try:
            data = await self.gw.call("/v3/kv/range", keys.prefix_range(prefix, keys_only=False))
        except _Denied as exc:
            raise _denied(exc, name, self.gw.username, f"read {prefix.decode('utf-8', 'replace')!r}") from None
        queue = keys.contenders(prefix, data.get("kvs") or [])
        owners: dict[bytes, str] = {}
        permits: int | None = None
        for c in queue:
            owner, n = keys.parse_owner(c.value) if c.value else (None, None)
            if owner is not None:
                owners[c.key] = owner
            if c is queue[0]:
                permits = n
        return queue, keys.holders(queue, permits), owners

    async def inspect(self, name: str) -> LockInfo | None:
        queue, holders, owners = await self._snapshot(name)
        if not holders:
            return None
        infos = []
        for h in holders:
            ttl_left: float | None = None
            if h.lease:
                data = await self.gw.call("/v3/lease/timetolive", {"ID": str(h.lease)})
                ttl = int(data.get("TTL") or 0)
                ttl_left = float(max(0, ttl))
            owner = owners.get(h.key) or f"unknown:lease:{h.lease:x}"
            infos.append(HolderInfo(owner, h.rev, h.mode.value, ttl_left))
        return LockInfo(name, keys.kind_of(queue), tuple(infos), len(queue) - len(holders))

    async def list(self, prefix: str) -> list[LockInfo]:
        start = prefix.encode("utf-8")
        op = keys.range_op(start or b"\x01", keys.prefix_end(start) if start else b"\x00")
        try:
            data = await self.gw.call("/v3/kv/range", op)
        except _Denied as exc:
            raise _denied(exc, None, self.gw.username, f"read the keys under {prefix!r}") from None
        names: set[str] = set()
        for kv in data.get("kvs") or []:
            if not int(kv.get("lease") or 0):
                continue
            parsed = keys.split_key(keys.unb64(kv.get("key")))
            if parsed is not None and parsed[0].startswith(prefix):
                names.add(parsed[0])
        out = []
        for name in sorted(names):
            info = await self.inspect(name)
            if info is not None:
                out.append(info)
        return out

    async def break_lock(self, name: str) -> bool:
        _, holders, _ = await self._snapshot(name)
        if not holders:
            return False
        try:
            await self.gw.txn_each([keys.delete_op(h.key) for h in holders])
        except _Denied as exc:
            raise _denied(exc, name, self.gw.username, f"delete keys under {name + '/'!r}") from None
        broken = {(h.key, h.rev) for h in holders}
        with self._guard:
            mine = [t for t, e in self._entries.items() if (e.key, e.rev) in broken]
        for h in holders:
            if h.lease:
                await self.gw.revoke(h.lease)  # the holder's keepalive now fails: it learns it lost the lock
        for token in mine:
            self.lost(token, "broken by an admin (break_lock)")
        return True

    async def aclose(self) -> None:
        with self._guard:
            pooled = [lease.id for pool in self._pool.values() for lease in pool] + self._stale
            self._pool.clear()
            self._stale = []
        for lease in pooled:  # free leases would expire by themselves: do not make close() wait long for this
            if not await self.gw.revoke(lease, op_timeout=min(1.0, self.gw.op_timeout)):
                break
        await self.gw.client.aclose()


__all__ = ["Backend", "EtcdGuard", "guard"]
