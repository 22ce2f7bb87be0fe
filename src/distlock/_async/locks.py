"""The lock objects users hold: lock, rlock and the read-write pair (the semaphore, a lock whose holdings take
permits, is in ``semaphore.py``; the multilock in ``multilock.py``).

One object may be shared by many threads (sync) or tasks (async); each *owner* (the thread or task that
called ``acquire``) has its own holding with its own token, fence and lost event. So two threads sharing
one ``store.lock("x")`` exclude each other, and a thread can never release another thread's holding.
Reentrancy (``rlock``) is a per-owner count kept here, with no I/O on re-entry (as Curator does).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import _idiom_async as idiom
from .. import _rt_async as rt
from .._core import forks, ids
from .._core.text import seconds
from .._core.timing import Deadline
from .._core.types import Claim, Mode
from .._core.validate import check_capacity, check_max_hold, check_timeout, check_ttl
from .._errors import AcquireTimeout, ConfigError, LockError, LockLost, NotHeld, UnsupportedFeature
from .clock import Holding
from .held import LeaseView, LostCallback, RevokeCallback, RiskCallback

if TYPE_CHECKING:
    from .acquirer import AsyncAcquirer
    from .store import AsyncStore

log = logging.getLogger("distlock")

#: what ``with`` / ``async with`` gives: the object itself, typed as held (its ``fence`` an ``int``; a type only)
H = TypeVar("H")


def _wait_of(blocking: bool, timeout: float | None, *, name: str, backend: str) -> float | None:
    if not blocking:
        if timeout is not None:
            raise ConfigError("a timeout cannot be given with blocking=False", name=name, backend=backend)
        return 0.0
    return check_timeout(timeout, name=name, backend=backend)


class _Scoped(idiom.AsyncOnly, Generic[H]):
    """``with lock:`` / ``async with lock:`` for every lock object (and for an election: ``_take`` campaigns,
    ``_give_back`` resigns).

    Enter: acquire within the object's ``timeout`` or raise ``AcquireTimeout`` (never run the body without
    the lock, as python-etcd3 did: its issue #599). Exit: release; if the lock was lost meanwhile, ``LockLost`` is
    raised, unless the body already raised (its exception wins and is not masked).
    """

    name: str
    timeout: float | None
    _acquirer: AsyncAcquirer
    #: what ``AcquireTimeout`` says was not done in time
    _taken = "acquired"

    async def _take(self) -> bool:
        raise NotImplementedError

    async def _give_back(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> H:
        if not await self._take():
            waited = seconds(self.timeout or 0.0)
            raise AcquireTimeout(f"not {self._taken} within {waited}", name=self.name, backend=self._acquirer.scheme)
        return self  # type: ignore[return-value]  # H: this object, typed as held while the block runs

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            await self._give_back()
            return
        try:
            await self._give_back()
        except LockError as err:
            log.warning("giving back %r after an error in the body failed: %s", self.name, err)


class _Acquirable(_Scoped[H]):
    """The lock objects: ``with`` acquires within the object's ``timeout`` and releases."""

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        raise NotImplementedError

    async def release(self) -> None:
        raise NotImplementedError

    async def _take(self) -> bool:
        return await self.acquire(timeout=self.timeout)

    async def _give_back(self) -> None:
        await self.release()


class AsyncLock(_Acquirable["AsyncHeldLock"], LeaseView):
    """A mutex (``store.lock``), reentrant mutex (``store.rlock``) or one half of a read-write lock.

    ``acquire(blocking=True, timeout=None)`` follows ``threading.Lock.acquire``; ``timeout=None``
    waits forever. ``with lock:`` acquires within the object's ``timeout`` or raises ``AcquireTimeout``.
    """

    #: the other side of a read-write lock (``rw.read`` <-> ``rw.write``); None for every other kind
    _sibling: AsyncLock | None = None

    def __init__(
        self,
        store: AsyncStore,
        name: str,
        *,
        mode: Mode = Mode.EXCLUSIVE,
        ttl: float = 30.0,
        timeout: float | None = None,
        auto_renew: bool = True,
        on_lost: LostCallback | None = None,
        reentrant: bool = False,
        permits: int | None = 1,
        fair: bool = False,
        max_hold: float | None = None,
    ) -> None:
        backend = store.scheme
        self.name = store._acquirer.check_name(name)
        self.ttl = check_ttl(ttl, name=name, backend=backend)
        #: a lease cap: each holding is lost (and released) this long after its grant, renewals or not
        self.max_hold = check_max_hold(max_hold, name=name, backend=backend)
        self.timeout = check_timeout(timeout, name=name, backend=backend)
        #: a semaphore's declared capacity (None: the one stored on the server governs); 1 for every other kind
        self.permits = check_capacity(permits, name=name, backend=backend) if mode is Mode.SEMAPHORE else 1
        self.mode = mode
        self.auto_renew = bool(auto_renew)
        self.reentrant = reentrant
        self.fair = bool(fair)
        self._acquirer = store._acquirer  # the acquire loop and the holdings: every call below goes there
        self._acquirer.check_supported(self.name, mode, self.fair)
        self._holds: dict[object, list[Holding]] = {}  # by owner, innermost last; read through _by_owner()
        self._gen = forks.generation()
        self._inherited = False  # a forked child's copy of this object dropped its parent's holdings
        self._mutex = threading.Lock()  # protects _holds; never held across I/O
        self._callbacks: list[LostCallback] = [on_lost] if on_lost is not None else []
        self._risk_callbacks: list[RiskCallback] = []
        self._revoke_callbacks: list[RevokeCallback] = []
        self._last: Holding | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.mode.value} on {self._acquirer.scheme}>"

    # -- acquire ---------------------------------------------------------------------------------------
    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Acquire; True on success, False if not acquired in time (``blocking=False``: one attempt)."""
        return await self._acquire(self._wait_of(blocking, timeout), 1)

    async def _acquire(self, wait: float | None, want: int) -> bool:
        """Acquire within ``wait`` seconds (None: no limit), taking ``want`` permits (a semaphore; else 1)."""
        key = rt.owner_key()
        with self._mutex:
            mine = self._by_owner().get(key)
            if mine and not self.reentrant and self.mode is not Mode.SEMAPHORE and mine[-1].lost.is_set():
                # The holding was lost: this owner holds nothing, so it may take the lock again (the lost
                # holding's release() would only say LockLost). A reentrant holding stays: its count says
                # the owner is still inside, and re-entering a lost lock must fail.
                mine.pop()
                if not mine:
                    del self._by_owner()[key]
                mine = self._by_owner().get(key)
            if mine and self.mode is not Mode.SEMAPHORE:
                current = mine[-1]
                if not self.reentrant:
                    raise LockError(
                        "already held by this owner (use store.rlock() for a reentrant lock)",
                        name=self.name,
                        backend=self._acquirer.scheme,
                    )
                if not current.lost.is_set():
                    current.count += 1
                    return True
        if mine and self.mode is not Mode.SEMAPHORE:
            raise LockLost(
                f"cannot re-enter: the holding was lost ({mine[-1].lost_reason})",
                name=self.name,
                backend=self._acquirer.scheme,
            )
        claim = Claim(
            name=self.name,
            mode=self.mode,
            token=ids.new_token(),
            owner=ids.owner_id(rt.owner_label(), self._acquirer.client_name),
            ttl=self.ttl,
            permits=self.permits,
            fair=self.fair,
            companion=None if self._sibling is None else self._companion(key),
            want=want,
        )
        won = await self._acquirer.acquire(claim, Deadline.after(wait))
        if won is None:
            return False
        holding = won.holding(self, self._callbacks, self.auto_renew, self._risk_callbacks, self.max_hold)
        with self._mutex:
            self._by_owner().setdefault(key, []).append(holding)
            self._last = holding
        self._acquirer.register(holding)
        return True

    def _companion(self, key: object) -> str | None:
        """A side of a read-write lock, asked by an owner that holds the other side: the token of its write
        holding when it takes the read (a downgrade: granted at once, ``Claim.companion``); ``LockError`` at
        once when it holds the read and asks for the write (an upgrade: two readers doing it at once would
        wait for each other for ever)."""
        assert self._sibling is not None
        theirs = self._sibling._live_holding(key)
        if theirs is None:
            return None
        scheme = self._acquirer.scheme
        if self.mode is Mode.WRITE:
            raise LockError(
                "read-to-write upgrade refused: release the read lock first (two readers upgrading at once "
                "would wait for each other for ever)",
                name=self.name,
                backend=scheme,
            )
        if not self._acquirer.capabilities.downgrade:
            raise UnsupportedFeature(
                f"taking the read lock while holding the write lock (a downgrade) is not supported on {scheme} "
                "yet: release the write lock first",
                name=self.name,
                backend=scheme,
            )
        return theirs.claim.token

    def _live_holding(self, key: object) -> Holding | None:
        """This owner's current holding, if it is not lost."""
        with self._mutex:
            mine = self._by_owner().get(key)
        return mine[-1] if mine and not mine[-1].lost.is_set() else None

    def _wait_of(self, blocking: bool, timeout: float | None) -> float | None:
        """How long acquire() may wait: threading's rules (a timeout with blocking=False is an error)."""
        if blocking and timeout is None:  # the common call, acquire(): no limit, nothing to check
            return None
        return _wait_of(blocking, timeout, name=self.name, backend=self._acquirer.scheme)

    # -- release ---------------------------------------------------------------------------------------
    async def release(self) -> None:
        """Release this owner's holding. ``NotHeld`` if it holds nothing, ``LockLost`` if it was lost."""
        key = rt.owner_key()
        with self._mutex:
            mine = self._by_owner().get(key)
            if not mine:
                raise NotHeld(
                    "release() by an owner that does not hold it", name=self.name, backend=self._acquirer.scheme
                )
            holding = mine[-1]
            if holding.count > 1:
                holding.count -= 1
                return
        self._acquirer.check_expiry(holding)
        # The round trip and the bookkeeping run to completion even if the caller is cancelled: a half-done
        # release must not leave the lock looking free while it is held, or held while it is free.
        released = await rt.shielded(self._release_holding(holding))
        if holding.lost.is_set() or not released:
            if not holding.lost.is_set():
                self._acquirer.lose(holding, "the lease was gone when release() reached the backend")
            raise LockLost(f"lost before release: {holding.lost_reason}", name=self.name, backend=self._acquirer.scheme)

    async def _release_holding(self, holding: Holding) -> bool:
        try:
            return await self._acquirer.release(holding)
        finally:
            self._forget(holding)

    # -- renewal and state -----------------------------------------------------------------------------
    async def extend(self, ttl: float | None = None) -> None:
        """Renew this owner's lease now, optionally with a new TTL (which later renewals keep).

        ``LockLost`` if the lease had already run out, was refused, or ran out while the request was on its
        way (an answer that comes after the lease end confirms nothing).
        """
        holding = self._own_holding()
        new_ttl = self.ttl if ttl is None else check_ttl(ttl, name=self.name, backend=self._acquirer.scheme)
        await self._acquirer.extend(holding, new_ttl)

    async def locked(self) -> bool:
        """Does anyone hold this name right now (asks the backend)?"""
        info = await self._acquirer.inspect(self.name)
        return info is not None and bool(info.holders)

    async def owned(self) -> bool:
        """Does this owner still hold it? Checked with the backend; a negative answer sets ``lost``."""
        with self._mutex:
            mine = self._by_owner().get(rt.owner_key())
        if not mine:
            return False
        return await self._acquirer.still_held(mine[-1])

    @property
    def hold_count(self) -> int:
        """How many times the calling owner holds this lock now, with no I/O: an ``rlock``'s re-entry count,
        1 for a held mutex or side of a read-write lock, the permits it holds of a semaphore; 0 when it holds
        nothing. A lost holding still counts until its ``release()`` (``lost`` tells it apart)."""
        with self._mutex:
            mine = self._by_owner().get(rt.owner_key())
        return sum(holding.count * holding.claim.want for holding in mine) if mine else 0

    @property
    def fence(self) -> int | None:
        """The fencing token of this owner's current holding (strictly increasing per name), else None."""
        with self._mutex:
            mine = self._by_owner().get(rt.owner_key())
        return mine[-1].fence if mine else None

    @property
    def lost(self) -> rt.Event:
        """Set when this owner's holding (or, outside an owner, the latest holding) is lost."""
        with self._mutex:
            mine = self._by_owner().get(rt.owner_key())
            return self._lost_event(mine[-1] if mine else self._last)

    def _by_owner(self) -> dict[object, list[Holding]]:
        """The holdings by owner (under the mutex). In a forked child none of its parent's: they are dropped
        here, with no word to the backend (``forks``), so the child neither releases, renews nor reports them,
        and an owner of the child (its thread has the forking thread's id) starts with nothing held."""
        if self._gen != forks.generation():
            self._gen = forks.generation()
            self._inherited = self._inherited or any(self._holds.values())
            self._holds = {}
            self._last = None
        return self._holds

    def _inherited_only(self) -> bool:
        """This owner holds nothing here, and this object dropped the holdings of the process that forked this
        one: a ``with`` block the parent entered is ending in the child."""
        with self._mutex:
            mine = self._by_owner().get(rt.owner_key())  # first: it is what notices the fork
            return self._inherited and not mine

    async def _give_back(self) -> None:
        if self._inherited_only():
            return  # the parent's holding stays the parent's: leaving its with block in a child releases nothing
        await self.release()

    def _viewed(self) -> Holding | None:
        """This owner's current holding (``LeaseView``), lost or not; None if it holds nothing here."""
        with self._mutex:
            mine = self._by_owner().get(rt.owner_key())
        return mine[-1] if mine else None

    def _own_holding(self) -> Holding:
        with self._mutex:
            mine = self._by_owner().get(rt.owner_key())
        if not mine:
            raise NotHeld("not held by this owner", name=self.name, backend=self._acquirer.scheme)
        return mine[-1]

    def _forget(self, holding: Holding) -> None:
        with self._mutex:
            for key, mine in list(self._by_owner().items()):
                if holding in mine:
                    mine.remove(holding)
                    if not mine:
                        del self._by_owner()[key]

    def _held(self) -> list[Holding]:
        with self._mutex:
            return [h for mine in self._by_owner().values() for h in mine]


class AsyncReadWriteLock:
    """``rw.read`` and ``rw.write`` are lock objects on one name: many readers or one writer.

    A waiting writer blocks new readers, so a stream of readers cannot starve it. Both sides are reentrant per
    owner. The write holder may take the read lock (granted at once), and so downgrade by releasing the write
    lock; a reader asking for the write lock is refused at once (``LockError``): release the read first.
    """

    def __init__(self, store: AsyncStore, name: str, **options: Any) -> None:
        self.name = name
        self.read = AsyncLock(store, name, mode=Mode.READ, reentrant=True, **options)
        self.write = AsyncLock(store, name, mode=Mode.WRITE, reentrant=True, **options)
        self.read._sibling, self.write._sibling = self.write, self.read

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


if TYPE_CHECKING:
    # What ``async with lock as held:`` gives, for type checkers: the lock object itself, whose ``fence`` is an
    # ``int`` for the owner inside the block: its holding stays its own until the exit releases it, lost or not
    # (outside a holding, and for another task or thread, ``lock.fence`` stays ``int | None``). An election
    # keeps its own type: a lost leadership's ``term`` is None, inside the block too.

    class AsyncHeldLock(AsyncLock):
        @property
        def fence(self) -> int: ...
