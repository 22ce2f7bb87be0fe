"""The seed documents' WRONG Redis locks, as plain test-only classes (never ship these).

Each takes a redis-py client and has ``acquire(blocking=True, timeout=None) -> bool`` and ``release()``,
like ``threading.Lock``; ``fence`` is always None (none of them has fencing tokens). ``hook(point)`` is
called at the moment the algorithm is most fragile (``"window"``), so a fault injector can crash or
pause a holder exactly there; it may also sleep to widen the window. Used by
``tests/test_redis_contention.py`` and reusable by any checker (``distlock check --algorithm``).

=====================  ===========================================================  ============================
class                  what it does                                                  what breaks it
=====================  ===========================================================  ============================
SetnxThenExpire        ``SETNX`` then ``EXPIRE``: two commands; release = ``DEL``    a crash between the two:
                                                                                     a lock with no TTL, forever
GetsetOnExpired        value = expiry timestamp (client clock); an expired value     a holder paused past its
                       is taken over with ``GETSET``; release = ``DEL``              timestamp goes on writing,
                                                                                     then deletes the next lock
DelWithoutOwnerCheck   ``SET NX PX`` (atomic, correct); release = plain ``DEL``      a holder paused past the TTL
                                                                                     deletes its successor's lock
=====================  ===========================================================  ============================
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import redis

POLL = 0.01


class _Broken:
    fence: int | None = None

    def __init__(
        self, client: redis.Redis, name: str, ttl: float = 10.0, hook: Callable[[str], None] | None = None
    ) -> None:
        self.client = client
        self.name = name
        self.ttl = ttl
        self.hook = hook or (lambda point: None)
        self.token = ""

    def try_once(self) -> bool:
        raise NotImplementedError

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.try_once():
                return True
            if not blocking or (deadline is not None and time.monotonic() >= deadline):
                return False
            time.sleep(POLL)  # these baselines poll, as the seeds do

    def release(self) -> None:
        self.client.delete(self.name)  # no owner check: the shared flaw of the seeds' release


class SetnxThenExpire(_Broken):
    """Seed 002, wrongGetLock1: the TTL is set by a second command."""

    def try_once(self) -> bool:
        self.token = secrets.token_hex(16)
        if not self.client.setnx(self.name, self.token):
            return False
        self.hook("window")  # a crash here leaves a key without TTL
        self.client.expire(self.name, max(1, round(self.ttl)))
        return True


class GetsetOnExpired(_Broken):
    """Seed 000 / seed 002 wrongGetLock2: the value is the expiry time, taken over with GETSET."""

    def try_once(self) -> bool:
        now = time.time()
        expires = str(now + self.ttl)
        if self.client.setnx(self.name, expires):
            return True
        current = self.client.get(self.name)
        if current is not None and float(current) < now:
            self.hook("window")
            old = self.client.getset(self.name, expires)
            return old is not None and float(old) < now
        return False


class DelWithoutOwnerCheck(_Broken):
    """Seed 002, wrongReleaseLock1: atomic acquire, but release deletes whoever holds the key."""

    def try_once(self) -> bool:
        self.token = secrets.token_hex(16)
        ok = bool(self.client.set(self.name, self.token, nx=True, px=max(1, round(self.ttl * 1000))))
        if ok:
            self.hook("window")
        return ok


BROKEN: dict[str, type[_Broken]] = {
    "setnx-expire": SetnxThenExpire,
    "getset": GetsetOnExpired,
    "del-no-owner": DelWithoutOwnerCheck,
}
