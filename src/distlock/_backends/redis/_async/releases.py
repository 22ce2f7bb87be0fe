"""What makes a release idempotent across retries (``ReleaseLog``), shared by the single-node and the Redlock
backend: each keeps one, fed by its acquires (``confirmed``), its renewal batches (``renewed``) and its
releases; and the renewals both backends make over it (``RenewingBackend``, their base)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ...._async.backend import AsyncBackend
from ...._core.timing import WAITER_TTL, lease_end, monotonic
from ...._core.types import Claim
from .. import calls as rc


class ReleaseLog:
    """What a release needs to be idempotent: for each held token, the local end of its last confirmed lease
    (``lease_end`` of the request that confirmed it), and whether a release of it may already have run.

    The rule: a release that finds the token gone (0) is still a success when an earlier try of this
    release may have run on the server (the driver re-sent it after a dropped connection or a timeout, or a
    previous ``release()`` raised) AND the reply came before the local lease end. The server's lease ends no
    earlier than ours, so until then the key could only have gone by our own release (or an admin's
    break_lock or a flush, which remove it just the same): nobody else can have held the name in between.
    After the local lease end the answer stays ``False`` (``LockLost``): the lease may have run out first.
    """

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._unsure: set[str] = set()

    def confirmed(self, claim: Claim, sent: float) -> None:
        self._until[claim.token] = lease_end(sent, claim.ttl)

    def handed(self, claim: Claim, since: float) -> float | None:
        """Hold ``claim`` by a direct hand-over: its lease counts from ``since`` (the send of the try whose queue
        entry the release granted, before the grant) and lasts the TTL capped at the queue deadline, which that
        try set ``WAITER_TTL`` after ``since`` or later (``handover_lease``).
        Returns the time left, or None (nothing recorded) when less than half that lease is left: the waiter
        then tries instead, and its try confirms the grant for a full TTL, rather than a first renewal racing
        a short lease (a needless ``lost``)."""
        lease = rc.handover_lease(claim.ttl, WAITER_TTL)
        left = lease_end(since, lease) - monotonic()
        if left < lease / 2:
            return None
        self.confirmed(replace(claim, ttl=lease), since)
        return left

    def renewed(self, claims: Sequence[Claim], ok: Sequence[bool], sent: float) -> None:
        for c, good in zip(claims, ok, strict=True):
            if good:
                self._until[c.token] = lease_end(sent, c.ttl)
            else:
                self.forget(c.token)

    def until(self, token: str) -> float:
        """The local end of the token's last confirmed lease (0.0: none known)."""
        return self._until.get(token, 0.0)

    def unsure(self, token: str) -> None:
        if token in self._until:
            self._unsure.add(token)

    def released(self, token: str, ok: bool, gone: bool, retried: bool = False) -> bool:
        """The answer of a release: ``ok`` = the token held and was removed now; ``gone`` = it is not held
        (any more); ``retried`` = this very call was sent twice."""
        if not ok and gone and (retried or token in self._unsure) and monotonic() < self._until.get(token, 0.0):
            ok = True
        self.forget(token)
        return ok

    def forget(self, token: str) -> None:
        self._until.pop(token, None)
        self._unsure.discard(token)


#: the renew script's calls of a batch: (name, (token, mode, lease in ms)) per claim
RenewCalls = list[tuple[str, Sequence[str | int]]]


class RenewingBackend(AsyncBackend):
    """The base of the single-node and the Redlock backend: their ``renew`` and ``shorten``, over the
    ``ReleaseLog`` each keeps (``releases``). A backend sends a batch its own way (``renew_round``)."""

    releases: ReleaseLog

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        """The renew script's calls of ``claims``, sent by ``renew_round`` (timed from before the send: a lease
        counts from then), and the outcome fed to ``releases``."""
        if not claims:
            return []
        calls: RenewCalls = [(c.name, (c.token, c.mode.value, rc.ms(c.ttl))) for c in claims]
        sent = monotonic()
        out = await self.renew_round(claims, calls, min(c.ttl for c in claims), sent)
        self.releases.renewed(claims, out, sent)
        return out

    async def renew_round(self, claims: Sequence[Claim], calls: RenewCalls, shortest: float, sent: float) -> list[bool]:
        """One renewal batch's round trip(s): extended or not, per claim (``shortest``: the shortest lease)."""
        raise NotImplementedError

    async def shorten(self, claim: Claim, ttl: float) -> bool:
        """The renew script is the guarded step (our token only, PEXPIRE to ``ttl`` on each server's clock;
        Redlock: on a majority, and a master that missed it keeps the longer lease, which keeps others out
        longer, never less). No release follows, so the token is forgotten here."""
        try:
            (ok,) = await self.renew([replace(claim, ttl=ttl)])
        finally:
            self.releases.forget(claim.token)
        return ok
