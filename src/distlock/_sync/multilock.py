# GENERATED from src/distlock/_async/multilock.py by scripts/gen_sync.py: edit that file, not this one.
"""A multi-lock: all of several names or none, acquired in one global order (sorted names), so that two
multi-locks over overlapping names cannot deadlock. Built from one ``AsyncLock`` per name (``locks.py``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .. import _rt_sync as rt
from .._core.timing import Deadline
from .._core.validate import check_timeout
from .._errors import ConfigError, LockError
from .clock import Holding
from .held import LostCallback, RevokeCallback
from .locks import Lock, _Acquirable, _wait_of

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger("distlock")


class MultiLock(_Acquirable["HeldMultiLock"]):
    """All of several locks or none, acquired in one global order (sorted names), so no deadlock."""

    def __init__(self, store: Store, names: list[str], **options: Any) -> None:
        if isinstance(names, str) or not names:
            raise ConfigError("multilock needs a non-empty list of names", backend=store.scheme)
        unique = sorted({store._acquirer.check_name(n) for n in names})
        self.names = unique
        self.timeout = check_timeout(options.pop("timeout", None), backend=store.scheme)
        self._acquirer = store._acquirer
        self._locks = [Lock(store, n, timeout=self.timeout, **options) for n in unique]
        self.name = ",".join(unique)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.names!r}>"

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        deadline = Deadline.after(_wait_of(blocking, timeout, name=self.name, backend=self._acquirer.scheme))
        taken: list[tuple[Lock, Holding]] = []
        try:
            for lock in self._locks:
                left = deadline.remaining()
                if not lock.acquire(blocking=left is None or left > 0, timeout=left):
                    self._release_all(taken)
                    return False
                taken.append((lock, lock._own_holding()))
        except BaseException:
            # Holdings, not lock objects: the shield runs in another task, which owns nothing itself.
            rt.shielded(self._release_all(taken))
            raise
        return True

    def _release_all(self, taken: list[tuple[Lock, Holding]]) -> None:
        for lock, holding in reversed(taken):
            try:
                lock._release_holding(holding)
            except LockError as err:
                log.warning("multilock: releasing %r after a failed acquire: %s", lock.name, err)

    def _give_back(self) -> None:
        if all(lock._inherited_only() for lock in self._locks):
            return  # entered by the process that forked this one (see AsyncLock._give_back)
        self.release()

    def release(self) -> None:
        """Release every name; ``LockLost`` (after releasing the rest) if any of them was lost."""
        first_error: LockError | None = None
        for lock in reversed(self._locks):
            try:
                lock.release()
            except LockError as err:
                first_error = first_error or err
        if first_error is not None:
            raise first_error

    def extend(self, ttl: float | None = None) -> None:
        for lock in self._locks:
            lock.extend(ttl)

    def locked(self) -> bool:
        for lock in self._locks:
            if lock.locked():
                return True
        return False

    def owned(self) -> bool:
        for lock in self._locks:
            if not lock.owned():
                return False
        return True

    @property
    def fences(self) -> dict[str, int | None]:
        """Per-name fencing tokens of the current holding: guard each resource with its own name's fence."""
        return {lock.name: lock.fence for lock in self._locks}

    @property
    def fence(self) -> int | None:
        """The largest per-name fence (use ``fences`` to guard resources by name)."""
        values = [f for f in self.fences.values() if f is not None]
        return max(values) if values else None

    @property
    def lost(self) -> rt.Event:
        """The lost event of the first name whose holding is lost (else of the first name)."""
        for lock in self._locks:
            if lock.lost.is_set():
                return lock.lost
        return self._locks[0].lost

    def on_lost(self, callback: LostCallback) -> LostCallback:
        for lock in self._locks:
            lock.on_lost(callback)
        return callback

    @property
    def revoke_requested(self) -> rt.Event:
        """The release-request event of the first name whose holding was asked to let go (else of the first
        name's holding): read it again to see a request to another name, or use ``on_revoke``."""
        for lock in self._locks:
            if lock.revoke_requested.is_set():
                return lock.revoke_requested
        return self._locks[0].revoke_requested

    @property
    def revoke_reason(self) -> str | None:
        """The reason of the release request to the first name whose holding was asked, else None."""
        for lock in self._locks:
            if lock.revoke_requested.is_set():
                return lock.revoke_reason
        return None

    def on_revoke(self, callback: RevokeCallback) -> RevokeCallback:
        """``callback(reason)`` once per release request to the holding of any of the names."""
        for lock in self._locks:
            lock.on_revoke(callback)
        return callback


if TYPE_CHECKING:
    # What ``async with multilock as held:`` gives, for type checkers (see ``locks.py``): ``fence`` an ``int``.

    class HeldMultiLock(MultiLock):
        @property
        def fence(self) -> int: ...
