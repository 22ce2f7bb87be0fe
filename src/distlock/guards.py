"""Guarded writes in the lock's own store (docs/safety.md: the two sound designs, the second).

``etcd_guard(lock)`` returns the compare that makes your own etcd transaction conditional on still holding
the lock (the lock key's create revision), as etcd's Go ``Mutex.IsOwner()`` does. See docs/etcd.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._async.locks import AsyncLock
from ._errors import ConfigError
from ._sync.locks import Lock

if TYPE_CHECKING:
    from ._backends.etcd.guard import EtcdGuard


def etcd_guard(lock: Lock | AsyncLock) -> EtcdGuard:
    """The guard of the calling owner's current holding of ``lock`` (a lock of an etcd store): an ``EtcdGuard``,
    one class for sync and async locks."""
    try:
        if isinstance(lock, AsyncLock):
            from ._backends.etcd._async import guard as async_guard

            return async_guard(lock)
        from ._backends.etcd._sync import guard as sync_guard

        return sync_guard(lock)
    except ModuleNotFoundError as exc:
        raise ConfigError("etcd_guard() needs the etcd extra: pip install 'python-distlock[etcd]'") from exc
