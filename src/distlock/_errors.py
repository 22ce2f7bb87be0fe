"""The one error tree of distlock (documented in the README).

::

    LockError
    ├── AcquireTimeout        not acquired within the timeout
    ├── NotHeld               release/extend by a non-holder
    │   └── LockLost          was held, then lost (lease expired, renewal failed, session expired, broken)
    ├── UnsupportedFeature    backend cannot provide the requested kind/option
    ├── ConfigError           bad URL, option, name or argument (also a ValueError)
    └── BackendError          backend unreachable or failed; the driver's exception is chained as __cause__
        └── QuorumError       Redlock could not reach a majority

Every error carries ``.name`` (the lock name, or ``None`` when no lock is concerned) and ``.backend``
(the URL scheme, or ``None`` before a backend is known). Messages are one line and never contain
credentials: drivers' messages are passed through ``distlock._url.scrub`` before they are shown.
"""

from __future__ import annotations


class LockError(Exception):
    """Base class of every error distlock raises."""

    def __init__(self, message: str, *, name: str | None = None, backend: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.backend = backend

    def __str__(self) -> str:
        base = super().__str__()
        where = []
        if self.name is not None:
            where.append(f"lock {self.name!r}")
        if self.backend is not None:
            where.append(f"backend {self.backend}")
        return f"{base} ({', '.join(where)})" if where else base


class AcquireTimeout(LockError):
    """The lock was not acquired within the timeout."""


class NotHeld(LockError):
    """release() or extend() was called by someone who does not hold the lock."""


class LockLost(NotHeld):
    """The lock was held, then lost: lease expired, renewal failed, session expired or broken by an admin."""


class UnsupportedFeature(LockError):
    """The backend cannot provide the requested lock kind or option (raised when the object is built)."""


class ConfigError(LockError, ValueError):
    """Bad URL, option, lock name or argument."""


class BackendError(LockError):
    """The backend is unreachable or failed; the driver's exception is chained as ``__cause__``."""


class StaleFence(LockError):
    """A fenced write was refused: the resource has seen a higher fence (a newer holder wrote), so this writer's
    lock is gone whatever it believes (``distlock.fencing``). Nothing of the write was applied."""


class QuorumError(BackendError):
    """Redlock could not reach a majority of its masters."""


__all__ = [
    "AcquireTimeout",
    "BackendError",
    "ConfigError",
    "LockError",
    "LockLost",
    "NotHeld",
    "QuorumError",
    "StaleFence",
    "UnsupportedFeature",
]
