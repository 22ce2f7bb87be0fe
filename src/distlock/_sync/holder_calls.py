# GENERATED from src/distlock/_async/holder_calls.py by scripts/gen_sync.py: edit that file, not this one.
"""The round trips a holder makes about its own holding, beyond acquire and release: ``extend`` (a renewal
now), ``shorten`` (an at-most-once run that ended early), ``still_held`` (asks the backend) and ``proclaim`` (an
election leader's new value). Each takes the holding's one I/O turn (``LeaseClock.wait_io``), so it never races a
renewal, and an answer that comes after the lease end confirms nothing. A part of the store's acquirer
(``acquirer.py``), apart because it is the holder's side of the lease, not the acquire."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .. import _events as events
from .. import _rt_sync as rt
from .._core import forks
from .._core.timing import monotonic
from .._errors import LockLost, UnsupportedFeature
from .backend import SyncBackend
from .clock import Holding, LeaseClock


class HolderCalls:
    """Mixed into ``AsyncAcquirer``, which gives what is declared here."""

    backend: SyncBackend
    clock: LeaseClock
    scheme: str

    if TYPE_CHECKING:

        def ours(self, holding: Holding) -> None: ...
        def blocking(self) -> None: ...
        def check_expiry(self, holding: Holding) -> None: ...
        def lose(self, holding: Holding, reason: str, cause: str = events.GONE) -> None: ...
        def _forget(self, holding: Holding) -> None: ...
        def _released(self, holding: Holding, ok: bool, ends: bool) -> None: ...

    def extend(self, holding: Holding, ttl: float) -> None:
        """Renew ``holding`` now with ``ttl`` (which later renewals keep). ``LockLost`` if the lease had
        already run out, was refused, or ran out while the request was on its way (an answer that comes
        after the lease end confirms nothing)."""
        self.ours(holding)
        self.blocking()
        clock = self.clock
        if clock.check(holding):
            raise self._lost_error(holding)
        clock.wait_io(holding)  # one round trip at a time per holding: the renewer's, or ours
        claim = replace(holding.claim, ttl=ttl)
        sent = monotonic()
        try:
            ok = (self.backend.renew([claim]))[0]
        except BaseException:
            clock.end_io(holding, sent, ttl, None)  # it may still reach the server
            raise
        if ok:
            holding.claim = claim  # before end_io: the next renewal must carry the new TTL
        clock.end_io(holding, sent, ttl, ok)
        if not ok and not holding.lost.is_set():
            self.lose(holding, "extend() found the lease gone", events.REFUSED)
        if clock.check(holding):
            raise self._lost_error(holding)

    def shorten(self, holding: Holding, ttl: float) -> None:
        """Leave ``holding``'s lease to end ``ttl`` seconds from now instead of releasing it (an at-most-once
        run that ended before ``at_least``), then forget it here: no renewal, no ``lost`` at the old end.

        One round trip of the holding at a time (a renewal racing it could lengthen the lease again).
        ``UnsupportedFeature``: the backend has no lease to shorten; nothing was sent and the holding is as
        before. ``LockLost``: the lease was gone, or the answer came after its end. Any other error: the
        outcome is unknown, so the holding is forgotten and its lease ends by itself."""
        self.ours(holding)
        clock = self.clock
        clock.wait_io(holding)
        sent = monotonic()
        try:
            ok = rt.shielded(self.backend.shorten(holding.claim, ttl))
        except UnsupportedFeature:
            clock.end_io(holding, sent, holding.claim.ttl, False)  # nothing was sent: only frees the I/O turn
            raise
        except BaseException:
            self._forget(holding)
            self._released(holding, False, ends=True)  # no longer this process's either way
            raise
        if ok and not clock.check(holding):  # an answer after the old lease end confirms nothing
            self._forget(holding)
            self._released(holding, True, ends=True)  # this process's holding ends here (events, metrics)
            return
        clock.end_io(holding, sent, holding.claim.ttl, False)
        if not holding.lost.is_set():
            self.lose(holding, "the lease was gone when the job ended", events.REFUSED)
        raise self._lost_error(holding)

    def still_held(self, holding: Holding) -> bool:
        """Checked with the backend; a negative answer (or one after the lease end) loses the holding."""
        if holding.gen != forks.generation():
            return False  # a forked child's copy of its parent's holding (``ours``)
        self.check_expiry(holding)
        if holding.lost.is_set():
            return False
        self.blocking()
        if self.backend.holds(holding.claim):
            return not self.clock.check(holding)  # a "yes" that came after the lease end is no yes
        self.lose(holding, "the backend no longer lists this holder")
        return False

    def proclaim(self, holding: Holding, value: str) -> None:
        """An election leader's new value, stored atomically with a check that ``holding`` still leads;
        ``LockLost`` (and the holding lost) if it does not, or if the answer came after the lease end."""
        self.ours(holding)
        self.blocking()
        self.clock.wait_io(holding)  # not concurrently with a renewal of the same holding
        sent = monotonic()
        try:
            ok = self.backend.proclaim(holding.claim, value)
        finally:  # a proclaim confirms no lease (it does not extend it): it only frees the holding's I/O turn
            self.clock.end_io(holding, sent, holding.claim.ttl, False)
        if ok:
            holding.claim = replace(holding.claim, value=value)
        elif not holding.lost.is_set():
            self.lose(holding, "proclaim() found the leadership gone")
        if self.clock.check(holding):
            raise self._lost_error(holding)

    def _lost_error(self, holding: Holding) -> LockLost:
        return LockLost(f"lost: {holding.lost_reason}", name=holding.claim.name, backend=self.scheme)
