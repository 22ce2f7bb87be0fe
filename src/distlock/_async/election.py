"""Leader election: ``store.election(name)``, ``store.leader(name)`` and ``store.observe(name)``.

An election is a fair (FIFO) exclusive lock whose holding carries a value: campaigning is acquiring,
leading is holding, resigning is releasing, and the term is the holding's fence. So everything the locks
promise holds here too -- renewal, the lease clock that sets ``lost`` before anyone else can lead, and a
term that is strictly increasing over every leadership of the name -- and what a backend adds is where the
value lives and how it is replaced (``proclaim``) and watched (``backend.py``). The wire layouts (etcd's Go
``concurrency.Election``, Curator's ``LeaderLatch``, distlock's own elsewhere) are in docs/election.md.

Leadership belongs to the election object, not to a thread or task: any thread may ask ``is_leader()``
or read ``term`` while another campaigns. One campaign at a time per object.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from .. import _idiom_async as idiom
from .. import _rt_async as rt
from .._core import forks, ids
from .._core.timing import Deadline
from .._core.types import Claim, LeaderInfo, Mode
from .._core.validate import check_lease, check_timeout, check_value
from .._errors import ConfigError, LockError, LockLost, NotHeld, UnsupportedFeature
from . import leading
from .clock import Holding
from .held import LeaseView, LostCallback, RevokeCallback, RiskCallback
from .leading import ElectionCallback, LeaderCallback
from .locks import _Scoped

if TYPE_CHECKING:
    from .acquirer import AsyncAcquirer
    from .store import AsyncStore

log = logging.getLogger("distlock")

#: an observer reads again at least this often, push or not: a watch on a server cut off from its cluster
#: (an etcd member in a minority, a ZooKeeper node that lost its quorum) can go quiet instead of failing
RECHECK = 2.0


def check_elections(core: AsyncAcquirer, name: str) -> None:
    if not core.capabilities.elections:
        sql = core.scheme in ("mysql", "mariadb", "postgres", "postgresql")
        why = " (the SQL session modes have no queue: use mode=lease, the default)" if sql else ""
        raise UnsupportedFeature(f"leader election is not supported here{why}", name=name, backend=core.scheme)


class AsyncElection(_Scoped["AsyncElection"], LeaseView):
    """One candidate in the election ``name``: ``campaign``, then lead until ``resign`` or loss.

    ``with election:`` campaigns (with this process's owner id as the value) within the object's
    ``timeout`` or raises ``AcquireTimeout``, and resigns on exit (``LockLost`` if leadership was lost
    meanwhile, unless the body raised).
    """

    _taken = "leader"

    def __init__(
        self,
        store: AsyncStore,
        name: str,
        *,
        ttl: float = 30.0,
        timeout: float | None = None,
        on_lost: LostCallback | None = None,
    ) -> None:
        backend = store.scheme
        self.name = store._acquirer.check_name(name)
        self.ttl, self.timeout, _ = check_lease(ttl, timeout, name=name, backend=backend)
        self._acquirer = store._acquirer
        check_elections(self._acquirer, self.name)
        # Candidates queue in the backend's FIFO where it has one. Redlock has none (five masters' queues can
        # disagree on the order): there candidates of one store still queue locally in order, and candidates
        # of different processes are not ordered (docs/election.md).
        caps = self._acquirer.capabilities
        self._fair = caps.fair or caps.always_fair
        self._acquirer.check_supported(self.name, Mode.EXCLUSIVE, self._fair)
        self._mutex = threading.Lock()  # protects the fields below; never held across I/O
        self._holding: Holding | None = None  # read through _leading()
        self._inherited = False  # a forked child's copy of this object dropped its parent's leadership
        self._campaigning = False
        self._callbacks: list[LostCallback] = [on_lost] if on_lost is not None else []
        self._risk_callbacks: list[RiskCallback] = []
        self._revoke_callbacks: list[RevokeCallback] = []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self._acquirer.scheme}>"

    # -- campaign ----------------------------------------------------------------------------------------
    async def campaign(self, value: str | None = None, timeout: float | None = None) -> bool:
        """Queue up as a candidate and block until leader (True) or ``timeout`` (False; the candidacy is
        withdrawn). Candidates lead in the order they campaigned. ``value`` (default: this process's owner
        id) is what ``Store.leader`` and observers see while this candidate leads."""
        backend = self._acquirer.scheme
        owner = ids.owner_id(rt.owner_label(), self._acquirer.client_name)
        value = owner if value is None else check_value(value, name=self.name, backend=backend)
        wait = check_timeout(timeout, name=self.name, backend=backend)
        with self._mutex:
            if self._campaigning:
                raise LockError("this election object is already campaigning", name=self.name, backend=backend)
            leading = self._leading()
            if leading is not None and not leading.lost.is_set():
                raise LockError("already the leader (resign() first)", name=self.name, backend=backend)
            self._campaigning = True
        try:
            claim = Claim(
                name=self.name,
                mode=Mode.EXCLUSIVE,
                token=ids.new_token(),
                owner=owner,
                ttl=self.ttl,
                fair=self._fair,
                value=value,
            )
            won = await self._acquirer.acquire(claim, Deadline.after(wait))
            if won is None:
                return False
            holding = won.holding(self, self._callbacks, True, self._risk_callbacks)
            with self._mutex:
                self._holding = holding
            self._acquirer.register(holding)
            return True
        finally:
            with self._mutex:
                self._campaigning = False

    # -- while leading -----------------------------------------------------------------------------------
    def _current(self) -> Holding:
        with self._mutex:
            holding = self._leading()
        if holding is None:
            raise NotHeld("not the leader", name=self.name, backend=self._acquirer.scheme)
        self._acquirer.check_expiry(holding)
        if holding.lost.is_set():
            raise LockLost(f"leadership lost: {holding.lost_reason}", name=self.name, backend=self._acquirer.scheme)
        return holding

    async def is_leader(self) -> bool:
        """Checked with the backend; a negative answer sets ``lost``."""
        with self._mutex:
            holding = self._leading()
        if holding is None:
            return False
        return await self._acquirer.still_held(holding)

    @property
    def term(self) -> int | None:
        """The fence of the current leadership (None when not leading): strictly increasing over every
        leadership of the name. Pass it with every write the leader makes, and have the resource refuse a
        term lower than one it has seen."""
        with self._mutex:
            holding = self._leading()
        if holding is None or holding.lost.is_set():
            return None
        return holding.fence

    @property
    def value(self) -> str | None:
        """The value this candidate leads with (None when not leading)."""
        with self._mutex:
            holding = self._leading()
        return None if holding is None or holding.lost.is_set() else holding.claim.value

    async def proclaim(self, value: str) -> None:
        """Replace the leader's value, same term, atomically with a check of leadership. ``NotHeld`` if not
        leading; ``LockLost`` if leadership turned out to be lost."""
        value = check_value(value, name=self.name, backend=self._acquirer.scheme)
        holding = self._current()
        await self._acquirer.proclaim(holding, value)

    async def resign(self) -> None:
        """Give up leadership; the next candidate leads. ``NotHeld`` if not leading, ``LockLost`` if
        leadership was lost before (the value is gone either way)."""
        with self._mutex:
            holding = self._leading()
            if holding is None:
                raise NotHeld(
                    "resign() by a candidate that is not the leader", name=self.name, backend=self._acquirer.scheme
                )
        self._acquirer.check_expiry(holding)
        try:
            released = await rt.shielded(self._acquirer.release(holding))
        finally:
            with self._mutex:
                if self._holding is holding:
                    self._holding = None
        if holding.lost.is_set() or not released:
            if not holding.lost.is_set():
                self._acquirer.lose(holding, "the leadership was gone when resign() reached the backend")
            raise LockLost(f"lost before resign: {holding.lost_reason}", name=self.name, backend=self._acquirer.scheme)

    async def lead(
        self,
        fn: idiom.LeaderWork,
        *,
        requeue: bool = True,
        value: str | None = None,
        on_started: ElectionCallback | None = None,
        on_stopped: ElectionCallback | None = None,
        on_new_leader: LeaderCallback | None = None,
    ) -> int:
        """The leader loop of a service: campaign (waiting for ever, and out backend errors), call
        ``on_started(election)`` and ``fn(election)`` while leading, then give the leadership back and call
        ``on_stopped(election)``; with ``requeue`` (the default) campaign again, for ever; without, return
        after one term. Returns the number of terms led.

        On asyncio ``fn`` is ``async def`` and runs inside ``lease_timeout()``: it is cancelled when the
        leadership is lost, and the loop goes on. In sync code ``fn`` is a plain function that cannot be
        cancelled: it must watch ``election.lost`` (or call ``election.check()``, which raises ``LockLost``) and
        return. An exception from ``fn`` or a callback resigns and propagates; cancelling the task (or
        Ctrl-C) withdraws the candidacy or resigns on the way out. ``on_new_leader(info)`` is called with each
        new leader (a ``LeaderInfo``, or None for none), this candidate included, from a worker of its own."""
        if not callable(fn):
            raise ConfigError(f"lead() takes a function, not {fn!r}", name=self.name, backend=self._acquirer.scheme)
        return await leading.lead(
            self,
            fn,
            requeue=requeue,
            value=value,
            on_started=on_started,
            on_stopped=on_stopped,
            on_new_leader=on_new_leader,
        )

    def _observe(self, timeout: float | None) -> AsyncIterator[LeaderInfo | None]:
        return observe(self._acquirer, self.name, timeout)

    @property
    def lost(self) -> rt.Event:
        """Set when the current (or, when not leading, the last) leadership is lost."""
        with self._mutex:
            return self._lost_event(self._leading())

    async def _take(self) -> bool:
        return await self.campaign(timeout=self.timeout)

    def _viewed(self) -> Holding | None:
        """The current leadership (``LeaseView``), lost or not; None when not leading."""
        with self._mutex:
            return self._leading()

    def _leading(self) -> Holding | None:
        """The current leadership (under the mutex); in a forked child never its parent's, which is dropped
        here with no word to the backend (``forks``): the child neither resigns, renews nor reports it."""
        holding = self._holding
        if holding is not None and holding.gen != forks.generation():
            self._holding = holding = None
            self._inherited = True
        return holding

    async def _give_back(self) -> None:
        with self._mutex:
            leading = self._leading()  # first: it is what notices the fork
            inherited_only = self._inherited and leading is None
        if inherited_only:
            return  # the parent's leadership stays the parent's: leaving its with block in a child resigns nothing
        await self.resign()


# -- anyone may read ----------------------------------------------------------------------------------------
async def leader(core: AsyncAcquirer, name: str) -> LeaderInfo | None:
    return LeaderInfo.of(await core.inspect(name))


def _key(info: LeaderInfo | None) -> tuple[Any, ...] | None:
    return None if info is None else (info.term, info.owner, info.value)


async def observe(core: AsyncAcquirer, name: str, timeout: float | None) -> AsyncIterator[LeaderInfo | None]:
    """The current leader (or None), then every change of leader or value, until ``timeout`` (None: for
    ever). The backend's watch is armed before each read, so a change after a read wakes the next one; a
    change is reported as the state read after it (a leadership shorter than one read may be skipped where
    the backend has no change log: docs/election.md says which)."""
    deadline = Deadline.after(timeout)
    watch = await core.backend.watch(name)
    try:
        last: object = object()
        while True:
            info = await leader(core, name)
            if _key(info) != last:
                last = _key(info)
                yield info
            left = deadline.remaining()
            if left is not None and left <= 0:
                return
            await watch.wait(RECHECK if left is None else min(left, RECHECK))
    finally:
        await rt.shielded(watch.aclose())
