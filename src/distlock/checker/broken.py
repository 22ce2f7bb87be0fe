"""Known-broken locks, selectable with ``distlock check --algorithm``, so users (and our tests) see the checker fail.

They are the wrong examples of the seed design notes, written the way they usually appear in the wild; each is
correct in the common case and breaks under one fault:

=================  ==============================================================  =================================
name               what it does                                                    what breaks it
=================  ==============================================================  =================================
``setnx-expire``   ``SETNX`` then ``EXPIRE`` as two commands; release = ``DEL``    a crash between the two commands
                                                                                   leaves a lock with no TTL; a
                                                                                   holder paused past the TTL
                                                                                   deletes its successor's lock
``getset``         value = expiry timestamp; an expired one is taken over with     a holder paused past its
                   ``GETSET``; release = ``DEL`` if its own timestamp is not past  timestamp keeps working beside
                                                                                   its successor and is never told
``del-no-owner``   ``SET NX PX`` (atomic, with TTL); release = ``DEL`` without     a holder paused past the TTL
                   checking the owner                                              deletes its successor's lock
``no-ttl``         ``SET NX`` without TTL; release = compare-and-delete            a killed holder blocks everyone
                                                                                   forever (liveness)
``lockfile``       ``O_CREAT|O_EXCL`` lock file holding an expiry time; a stale    same as ``getset``, on a local
                   file is unlinked and retried; release = unlink                  file: no Redis needed
=================  ==============================================================  =================================

None of them tells a holder that it lost the lock, which is what the checker's ``silent overlap`` count finds.
Their fences come from a separate ``INCR`` (a counter file for ``lockfile``), which is why the fenced register
stays consistent even on these broken locks: fencing protects the resource even when the lock fails.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol


class CheckedLock(Protocol):
    """What a worker needs from a lock: one holding at a time."""

    fence: int | None

    def acquire(self, timeout: float) -> bool: ...

    def release(self) -> bool:
        """Release; True if it went cleanly, False if the holder learned it had lost the lock."""
        ...

    def close(self) -> None: ...


def _poll_pause() -> None:
    time.sleep(random.uniform(0.001, 0.004))


class _RedisLock:
    def __init__(self, url: str, name: str, ttl: float) -> None:
        import redis  # the baselines need redis-py: pip install 'python-distlock[redis]'

        self.r: Any = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=5)
        self.key = name
        self.fence_key = f"{name}:fence"
        self.ttl = ttl
        self.fence: int | None = None
        self.token = ""
        # called at the algorithm's most fragile point ("window"), so a fault injector can crash or pause a
        # holder exactly there (tests/test_redis_contention.py); it may sleep to widen the window
        self.hook: Callable[[str], None] = lambda point: None

    def _granted(self) -> bool:
        self.fence = int(self.r.incr(self.fence_key))
        return True

    def try_once(self) -> bool:
        raise NotImplementedError

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            self.token = secrets.token_hex(16)
            if self.try_once():
                return self._granted()
            if time.monotonic() >= deadline:
                return False
            _poll_pause()

    def release(self) -> bool:
        self.r.delete(self.key)
        return True

    def close(self) -> None:
        self.r.close()

    def cleanup(self) -> None:
        self.r.delete(self.key, self.fence_key)


class SetnxExpire(_RedisLock):
    """Seed version 2: SETNX, then EXPIRE in a second command; DEL on release."""

    def try_once(self) -> bool:
        if not self.r.setnx(self.key, self.token):
            return False
        self.hook("window")
        self.r.pexpire(self.key, int(self.ttl * 1000))  # a crash before this line leaves the key forever
        return True


class GetSet(_RedisLock):
    """The GETSET-on-an-expired-timestamp lock (the old SETNX command documentation's recipe)."""

    def try_once(self) -> bool:
        self.expires = time.time() + self.ttl
        if self.r.setnx(self.key, repr(self.expires)):
            return True
        current = self.r.get(self.key)
        if current is None or float(current) > time.time():
            return False
        self.hook("window")
        old = self.r.getset(self.key, repr(self.expires))
        return old is None or float(old) <= time.time()

    def release(self) -> bool:
        if time.time() < self.expires:
            self.r.delete(self.key)
        return True


class DelNoOwner(_RedisLock):
    """SET NX PX (atomic, with a TTL), but DEL without an owner check on release (seed version 3)."""

    def try_once(self) -> bool:
        ok = bool(self.r.set(self.key, self.token, nx=True, px=int(self.ttl * 1000)))
        if ok:
            self.hook("window")
        return ok


_COMPARE_AND_DELETE = """
-- KEYS[1] - lock name; ARGV[1] - token. Returns 1 if deleted (it was ours), else 0.
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class NoTtl(_RedisLock):
    """SET NX without a TTL (seed version 1, with an owner check added so only the missing TTL is wrong)."""

    def try_once(self) -> bool:
        return bool(self.r.set(self.key, self.token, nx=True))

    def release(self) -> bool:
        return bool(self.r.eval(_COMPARE_AND_DELETE, 1, self.key, self.token))


class LockFile:
    """An ``O_EXCL`` lock file that stores its expiry; a stale one is unlinked and taken. Needs no server."""

    def __init__(self, directory: Path, name: str, ttl: float) -> None:
        safe = name.replace("/", "_")
        self.path = directory / f"{safe}.lock"
        self.fence_path = directory / f"{safe}.fence"
        self.ttl = ttl
        self.fence: int | None = None
        self.expires = 0.0

    def _next_fence(self) -> int:
        # an append-only file whose size is the counter: O_APPEND writes are atomic on a local file system
        fd = os.open(self.fence_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, b".")
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def try_once(self) -> bool:
        self.expires = time.time() + self.ttl
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                stale = float(self.path.read_text() or "inf") < time.time()
            except (OSError, ValueError):
                return False
            if stale:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)  # races with another breaker, which may have just created a fresh file
            return False
        os.write(fd, repr(self.expires).encode())
        os.close(fd)
        return True

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.try_once():
            if time.monotonic() >= deadline:
                return False
            _poll_pause()
        self.fence = self._next_fence()
        return True

    def release(self) -> bool:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        return True

    def close(self) -> None:
        pass

    def cleanup(self) -> None:
        for p in (self.path, self.fence_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


Factory = Callable[[str, str, float, Path], Any]

#: --algorithm name -> (factory(url, lock name, ttl, workdir), needs a redis:// URL)
BROKEN: dict[str, tuple[Factory, bool]] = {
    "setnx-expire": (lambda url, name, ttl, wd: SetnxExpire(url, name, ttl), True),
    "getset": (lambda url, name, ttl, wd: GetSet(url, name, ttl), True),
    "del-no-owner": (lambda url, name, ttl, wd: DelNoOwner(url, name, ttl), True),
    "no-ttl": (lambda url, name, ttl, wd: NoTtl(url, name, ttl), True),
    "lockfile": (lambda url, name, ttl, wd: LockFile(wd, name, ttl), False),
}
