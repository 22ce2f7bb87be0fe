# GENERATED from src/distlock/_async/semaphore.py by scripts/gen_sync.py: edit that file, not this one.
"""The counting semaphore (``store.semaphore``): a lock object whose holdings take one or more permits each, and
``sem.take(n, timeout)``, the ``with`` block that holds ``n`` of them.

A semaphore is a lock (``locks.py``) in the semaphore mode: the owners, holdings, fences and ``lost`` are the
lock's; what is added here is the number of permits an acquire takes and the capacity kept on the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.arbiter import too_many_message
from .._core.validate import check_permits, check_timeout
from .._errors import ConfigError
from .locks import Lock, _Scoped

if TYPE_CHECKING:
    from .locks import HeldLock


class Semaphore(Lock):
    """A counting semaphore: holdings of one or more permits each, at most its capacity in all.

    ``acquire(permits=n)`` takes ``n`` permits all or nothing, as one holding (one lease, one fence, one
    ``release()``); one owner may hold several holdings. The capacity is kept on the server while the
    semaphore is in use: ``permits`` is the capacity this user declares (it must match the first user's), or
    None to follow the stored one; ``set_permits`` changes it for everyone.
    """

    if TYPE_CHECKING:

        def __enter__(self) -> HeldSemaphore: ...

    def acquire(self, blocking: bool = True, timeout: float | None = None, *, permits: int = 1) -> bool:
        """Take ``permits`` permits at once, all or nothing, as one holding; True on success, False if not granted
        in time (``blocking=False``: one attempt). ``ConfigError`` at once when ``permits`` is not an int >= 1 or
        exceeds the capacity (it could never be granted), or when this object's declared capacity differs from
        the one the semaphore was declared with."""
        scheme = self._acquirer.scheme
        want = check_permits(permits, name=self.name, backend=scheme)
        if self.permits is not None and want > self.permits:
            raise ConfigError(too_many_message(self.name, want, self.permits), backend=scheme)
        return self._acquire(self._wait_of(blocking, timeout), want)

    def take(self, permits: int = 1, timeout: float | None = None) -> _Take:
        """``async with sem.take(2, timeout=5):``: acquire ``permits`` permits within ``timeout`` (None: the
        object's ``timeout``) or raise ``AcquireTimeout``; release them when the block ends. ``take()`` with no
        arguments is ``async with sem:``."""
        scheme = self._acquirer.scheme
        want = check_permits(permits, name=self.name, backend=scheme)
        wait = self.timeout if timeout is None else check_timeout(timeout, name=self.name, backend=scheme)
        return _Take(self, want, wait)

    def set_permits(self, permits: int) -> bool:
        """Make ``permits`` the capacity in force for every user of this semaphore: later grants count against it;
        holders above a smaller one keep their permits until they release (nobody is revoked). True if the
        semaphore is in use (a holder or a waiter); False, and nothing stored, if it is free: then the next
        first user's ``permits`` decides."""
        n = check_permits(permits, name=self.name, backend=self._acquirer.scheme)
        return self._acquirer.set_permits(self.name, n)


class _Take(_Scoped["HeldSemaphore"]):
    """What ``sem.take(n, timeout)`` returns: a ``with`` block holding ``n`` permits of ``sem``."""

    def __init__(self, sem: Semaphore, want: int, timeout: float | None) -> None:
        self.sem = sem
        self.want = want
        self.name = sem.name
        self.timeout = timeout
        self._acquirer = sem._acquirer

    def _take(self) -> bool:
        return self.sem.acquire(timeout=self.timeout, permits=self.want)

    def _give_back(self) -> None:
        self.sem._give_back()

    def __enter__(self) -> HeldSemaphore:
        super().__enter__()
        return self.sem  # type: ignore[return-value]  # the semaphore, typed as held while the block runs


if TYPE_CHECKING:
    # What ``async with sem as held:`` gives, for type checkers: the semaphore, its ``fence`` an ``int`` inside the
    # block (see ``AsyncHeldLock`` in ``locks.py``).

    class HeldSemaphore(Semaphore, HeldLock): ...
