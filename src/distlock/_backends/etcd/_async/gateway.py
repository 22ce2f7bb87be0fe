"""The etcd v3 JSON gateway: requests to the members of one cluster, with failover, bounded time and auth.

Every etcd serves the gateway (grpc-gateway) on its client port: the same API as gRPC, as JSON over
HTTP/1.1 (``http.py``). We use it because it needs no generated code; python-etcd3 is unmaintained and
breaks with current protobuf.

This module is the transport and nothing else, the way etcd's Go client keeps its connection apart from
``concurrency``: opening a store (URL options, TLS files, authentication, a leader check), POSTing a body
with failover across the URL's members, the key-value calls the lock needs (a txn split to etcd's op
limit, a one-member read, a watch for deletes) and the mapping of the gateway's errors, including
"permission denied" (``Denied``, turned into a one-line error naming the lock by ``denied``).
What the calls mean for a lock lives in ``mutex.py`` (the queue) and ``leases.py`` (the leases).

Failure handling: every request has a bounded time; a refused connection or an unavailable member moves to
the next member of the URL; past the op timeout the call raises ``BackendError``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .... import _rt_async as rt
from ...._core import timing
from ...._core.text import seconds
from ...._core.timing import monotonic
from ...._errors import BackendError
from ...._tls import pop_tls, verify_failure
from ...._url import StoreConfig, scrub
from .. import keys
from .http import HTTPClient, Member

#: gRPC codes the gateway reports for a member that cannot serve now (no leader, leader changed, timeout;
#: 8 is also "too many requests")
_RETRY_CODES = {4, 8, 14}
#: ... but code 8 with this message is the cluster's NOSPACE alarm: it refuses every write that adds data
#: until an operator compacts, defragments and disarms it, so no retry can help
_NO_SPACE = "database space exceeded"
_NO_SPACE_HELP = (
    "the cluster's database is full (mvcc: database space exceeded, alarm NOSPACE): it refuses new locks until "
    "an operator compacts its history, defragments and disarms the alarm (etcdctl compact, defrag, alarm disarm); "
    "run etcd with --auto-compaction-retention (docs/etcd.md, 'Compaction')"
)
NOT_FOUND = 5
_PERMISSION_DENIED = 7
#: per-try limit of the renewal requests (keepalive, key check): they must fail over well within a lease
FAST_TRY = 0.5
#: ops per txn (etcd refuses more than --max-txn-ops, 128 by default)
MAX_TXN_OPS = 100


class Denied(BackendError):
    """etcd refused a request for lack of permission (the user's roles do not cover the key)."""


def denied(exc: Denied, name: str | None, user: str | None, what: str) -> BackendError:
    """The one-line error of a request etcd refused for lack of permission, naming the lock."""
    who = f"user {user!r}" if user else "this client"
    return BackendError(f"etcd: permission denied: {who} may not {what}", name=name, backend=exc.backend)


@dataclass(eq=False, repr=False)  # no repr: it would show the password and the token
class Gateway:
    """Requests to the JSON gateway with failover across endpoints, bounded time and token auth."""

    scheme: str
    bases: list[Member]
    client: HTTPClient
    op_timeout: float
    connect_timeout: float
    try_timeout: float
    _username: str | None
    _password: str | None
    _token: str | None = field(default=None, init=False)
    _current: int = field(default=0, init=False)

    @classmethod
    async def open(cls, config: StoreConfig) -> Gateway:
        """Read the URL's options, authenticate and check that the cluster has a leader."""
        op_timeout = config.pop_float("timeout", 5.0)
        connect_timeout = config.pop_float("connect_timeout", 2.0)
        try_timeout = config.pop_float("try_timeout", 1.0)
        opts = pop_tls(config)
        config.reject_unknown()
        tls = opts.context() if opts is not None else None
        bases: list[Member] = [(h.strip("[]"), int(p)) for h, p in config.hosts]
        client = HTTPClient(tls)  # connects to the members directly: never through a proxy from the environment
        gw = cls(
            config.scheme, bases, client, op_timeout, connect_timeout, try_timeout, config.username, config.password
        )
        try:
            await gw.authenticate()
            await gw.ping()
        except BaseException:
            await client.aclose()
            raise
        return gw

    @property
    def username(self) -> str | None:
        return self._username

    @property
    def base(self) -> Member:
        return self.bases[self._current % len(self.bases)]

    def rotate(self, failed: Member) -> None:
        """Move on to the next member, unless another caller already moved on from ``failed``."""
        if self.base == failed:
            self._current = (self._current + 1) % len(self.bases)

    def headers(self) -> dict[str, str]:
        """The request headers of the current authentication (the token, if any)."""
        return {"Authorization": self._token} if self._token else {}

    def error(self, message: str) -> BackendError:
        """A ``BackendError`` whose message carries neither the password nor the auth token."""
        return BackendError(f"etcd: {scrub(message, self._password, self._token)}", backend=self.scheme)

    async def authenticate(self) -> None:
        if self._username is None:
            return
        body = {"name": self._username, "password": self._password or ""}
        self._token = None
        data = await self.call("/v3/auth/authenticate", body, reauth=False)
        token = data.get("token")
        if not isinstance(token, str) or not token:
            raise self.error("authentication returned no token")
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
                raise self.error(f"no leader within {seconds(self.op_timeout)}")
            self.rotate(self.base)
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
        # the caller's deadline, where it is sooner (``timing.Budget``: an acquire's, ``run -w S``)
        op_timeout = timing.bound(self.op_timeout if op_timeout is None else op_timeout) or 0.0
        deadline = monotonic() + op_timeout
        tries = 0
        last = "no endpoint answered"
        payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        cause: BaseException | None = None
        untrusted: set[Member] = set()  # members whose certificate our CAs refused
        while True:
            base = self.base
            left = max(0.05, deadline - monotonic())
            # A member whose leader just died holds a proposal until its own ~6 s timeout; a short per-try
            # limit sends the retry to a member that can serve (every request here is safe to repeat).
            limit = self.try_timeout if try_timeout is None else try_timeout
            connect = self.connect_timeout if try_timeout is None else min(try_timeout, self.connect_timeout)
            try:
                resp = await self.client.post(
                    base, path, payload, self.headers(), timeout=min(left, limit), connect_timeout=min(left, connect)
                )
            except OSError as exc:  # refused, reset, timed out, TLS failure: try the next member
                last, cause = f"{type(exc).__name__} from {_label(base)}", exc
                refused = verify_failure(exc)
                if refused is not None:
                    # no retry makes a certificate trusted: once every member's was refused, say why at once
                    untrusted.add(base)
                    if len(untrusted) == len(self.bases):
                        raise self.error(f"{_label(base)}: {refused}") from exc
                self.rotate(base)
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
                if _NO_SPACE in message:
                    raise self.error(f"{path}: {_NO_SPACE_HELP}")
                if code not in _RETRY_CODES and resp.status < 500:
                    if "authentication failed" in message:
                        raise self.error("authentication failed (wrong user name or password)")
                    if code == _PERMISSION_DENIED or "permission denied" in message:
                        raise Denied(f"etcd: {path}: permission denied", backend=self.scheme)
                    if "user name is empty" in message:
                        raise self.error("the server has authentication on: put user:password in the URL")
                    raise self.error(f"{path}: {message}")
                last, cause = message, None
                self.rotate(base)
            tries += 1
            if monotonic() >= deadline:
                raise self.error(f"no answer within {seconds(op_timeout)} ({last})") from cause
            if tries % len(self.bases) == 0:
                await rt.sleep(min(0.2, 0.02 * tries))

    async def txn_each(self, ops: Sequence[dict[str, Any]], try_timeout: float | None = None) -> list[Any]:
        """Run independent ops (ranges, deletes) in as few txns as etcd allows (``--max-txn-ops``, 128 by
        default); the responses in order."""
        out: list[Any] = []
        for i in range(0, len(ops), MAX_TXN_OPS):
            data = await self.call("/v3/kv/txn", {"success": list(ops[i : i + MAX_TXN_OPS])}, try_timeout=try_timeout)
            out.extend(data.get("responses") or [])
        return out

    async def delete_if_created(self, key: bytes, rev: int, op_timeout: float | None = None) -> bool:
        """Delete ``key`` only if it still has create revision ``rev`` (still this holding's key, not a later
        one on the same lease); whether it did."""
        data = await self.call(
            "/v3/kv/txn",
            {"compare": [keys.create_is(key, rev)], "success": [keys.delete_op(key)]},
            op_timeout=op_timeout,
        )
        return bool(data.get("succeeded"))

    async def delete_all_if_created(
        self, created: list[tuple[bytes, int]], op_timeout: float | None = None
    ) -> dict[bytes, bool]:
        """``delete_if_created`` for many keys (key, create revision): one txn per ``MAX_TXN_OPS`` of them,
        which deletes them all if every one still has its create revision; if one has not (gone, or a later
        key on the same lease), that txn's keys are deleted one by one. All within ``op_timeout``."""
        end = None if op_timeout is None else monotonic() + op_timeout
        out: dict[bytes, bool] = {}
        for i in range(0, len(created), MAX_TXN_OPS):
            chunk = created[i : i + MAX_TXN_OPS]
            left = None if end is None else max(0.01, end - monotonic())
            data = await self.call(
                "/v3/kv/txn",
                {
                    "compare": [keys.create_is(key, rev) for key, rev in chunk],
                    "success": [keys.delete_op(key) for key, _ in chunk],
                },
                op_timeout=left,
            )
            if data.get("succeeded"):
                out.update((key, True) for key, _ in chunk)
                continue
            for key, rev in chunk:
                left = None if end is None else max(0.01, end - monotonic())
                out[key] = await self.delete_if_created(key, rev, op_timeout=left)
        return out

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
                self.headers(),
                timeout=max(0.01, timeout),
                connect_timeout=min(timeout + 0.01, self.connect_timeout),
            ) as resp:
                if resp.status != 200:
                    self.rotate(base)
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
            self.rotate(base)
            await rt.sleep(0.05)
        return None

    async def read_at(self, member: Member, body: dict[str, Any]) -> dict[str, Any] | None:
        """One try of a read at one member (no failover); None if it failed."""
        try:
            resp = await self.client.post(
                member,
                "/v3/kv/range",
                json.dumps(body).encode(),
                self.headers(),
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
