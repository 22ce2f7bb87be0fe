# GENERATED from src/distlock/_async/barrier.py by scripts/gen_sync.py: edit that file, not this one.
"""Barriers: ``store.barrier(name, parties)`` (``wait``: block until ``parties`` participants arrived) and
``store.double_barrier(name, parties)`` (``enter``: until ``parties`` entered; ``leave``: until all left), across
processes.

Each arrival is a lease on the server: its waiter looks every ``POLL`` seconds and renews it at the first look
after a third of ``ttl`` (the looks between write nothing), so a participant whose process died stops counting ``ttl`` after its last renewal. The arrival that
makes ``parties`` trips the generation: the server keeps a tripped marker listing its members until each has
seen it (or ``linger`` passed), and newcomers join the next generation. A ``wait``/``enter`` that times out
withdraws its arrival in the same atomic step that checks for a trip, so it is never counted by a trip it does
not see. The rules of the record are ``_core/barrier.py``'s; ZooKeeper's double barrier is Curator's
``DistributedDoubleBarrier`` layout instead (its own module).

Every call a wait makes ends by max(timeout, 2 s) + 0.5 s (docs/operations.md, "One deadline").
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from .. import _rt_sync as rt
from .._core import barrier, forks, ids
from .._core.barrier import ARRIVE, LEAVE, LEFT, LOOK, TRIPPED, WAITING, WITHDRAW, Op
from .._core.timing import Budget, Deadline
from .._core.validate import check_timeout
from .._errors import ConfigError, UnsupportedFeature

if TYPE_CHECKING:
    from .backend import SyncBackend
    from .store import Store

#: how often a waiter looks again (and so renews its arrival)
POLL = 0.2


class _Base:
    KIND = "barrier"

    def __init__(self, store: Store, name: str, parties: int, *, ttl: float, linger: float) -> None:
        scheme = store.scheme
        self.name = store._acquirer.check_name(name)
        self.parties = barrier.check_parties(parties, name=self.name, backend=scheme)
        self.ttl = barrier.check_span(ttl, "ttl", 1.0, name=self.name, backend=scheme)
        self.linger = barrier.check_span(linger, "linger", 1.0, name=self.name, backend=scheme)
        self._backend: SyncBackend = store._backend
        self._acquirer = store._acquirer
        why = self._backend.barrier_refused(self.KIND)
        if why is not None:
            raise UnsupportedFeature(why, name=self.name, backend=scheme)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} parties={self.parties} on {self._backend.scheme}>"

    def _check_open(self) -> None:
        self._acquirer.blocking()
        if self._acquirer.closed:
            raise ConfigError("the store is closed", name=self.name, backend=self._backend.scheme)

    def _step(self, kind: str, member: str, gen: str = "", *, consume: bool = True) -> barrier.Reply:
        op = Op(kind, member, gen, self.parties, self.ttl, self.linger, consume, ids.new_token())
        reply = self._backend.barrier_step(self.KIND, self.name, op)
        if kind == ARRIVE and reply.outcome == TRIPPED:  # this arrival made ``parties``: one trip, told once
            self._acquirer.events.debug(
                "trip", "%s %r tripped: %d arrived", self.KIND, self.name, self.parties, lock=self.name,
                kind=self.KIND, count=self.parties,
            )  # fmt: skip
        return reply

    def _arrive(self, timeout: float | None, *, consume: bool) -> tuple[bool, str, str]:
        """Arrive and wait for the trip: (tripped, member id, generation). Withdrawn when it did not trip."""
        wait = check_timeout(timeout, name=self.name, backend=self._backend.scheme)
        self._check_open()
        deadline = Deadline.after(wait)
        member = ids.new_token()
        gen = ""
        with Budget(until=deadline.calls_end()):
            try:
                reply = self._step(ARRIVE, member)  # in the try: a cancel may cut it after it was applied
                gen = reply.gen
                while reply.outcome != TRIPPED:
                    left = deadline.remaining()
                    if left is not None and left <= 0:
                        reply = self._step(WITHDRAW, member, gen, consume=consume)
                        return reply.outcome == TRIPPED, member, reply.gen
                    rt.sleep(POLL if left is None else min(left, POLL))
                    reply = self._step(LOOK, member, gen, consume=consume)
                    if reply.outcome not in (TRIPPED, WAITING):  # our arrival ran out (a stall longer than ttl)
                        reply = self._step(ARRIVE, member)
                        gen = reply.gen
                if consume:
                    self._step(LOOK, member, gen)  # off the marker (the tripping arrival is on it too)
                return True, member, gen
            except BaseException:
                rt.shielded(self._withdraw(member, gen, consume))
                raise

    def _withdraw(self, member: str, gen: str, consume: bool) -> bool:
        """Take the arrival back on the way out of a cancelled or failed wait; what it cannot reach in time
        ends with the arrival's lease (the error that brought us here is the one raised)."""
        with contextlib.suppress(Exception):
            return (self._step(WITHDRAW, member, gen, consume=consume)).outcome == TRIPPED
        return False


class Barrier(_Base):
    """A barrier of ``parties`` participants: ``wait(timeout)``. Reusable: each ``parties`` arrivals are one
    generation. Thread-safe (async: any task of its loop)."""

    def wait(self, timeout: float | None = None) -> bool:
        """Arrive and block until ``parties`` participants (this one included) have arrived: True. False after
        ``timeout`` seconds (None: for ever), with this arrival withdrawn (it counts for nobody)."""
        tripped, _member, _gen = self._arrive(timeout, consume=True)
        return tripped


class DoubleBarrier(_Base):
    """A double barrier of ``parties`` members: ``enter(timeout)`` then ``leave(timeout)``, once per object
    and generation (Curator's ``DistributedDoubleBarrier``). Thread-safe (async: any task of its loop)."""

    KIND = "double barrier"

    def __init__(self, store: Store, name: str, parties: int, *, ttl: float, linger: float) -> None:
        super().__init__(store, name, parties, ttl=ttl, linger=linger)
        self._entered: tuple[str, str] | None = None
        self._entered_in = 0  # the fork generation of the entry (a forked child neither leaves nor re-enters it)

    def _forked(self) -> ConfigError | None:
        """An entry of the parent process, found in a forked child (which inherited the object): the member is the
        parent's, and the child must not leave it. (A single barrier's wait keeps nothing in the object, and its
        renewals run in the waiting thread or task, which a child does not run: asyncio finds no running loop in
        a forked child.)"""
        if forks.generation() == self._entered_in:
            return None
        return ConfigError(
            "this double barrier was entered by the parent process before a fork: the child cannot leave it (the "
            "parent does; a new object in the child enters as a member of its own)",
            name=self.name,
            backend=self._backend.scheme,
        )

    def enter(self, timeout: float | None = None) -> bool:
        """Enter and block until ``parties`` members have entered: True. False after ``timeout`` seconds (None:
        for ever), with this entry withdrawn."""
        if self._entered is not None and self._forked() is not None:
            self._entered = None  # the parent's entry: a child entering through the inherited object enters anew
        if self._entered is not None:
            raise ConfigError(
                "this double barrier was entered already; leave() it first",
                name=self.name,
                backend=self._backend.scheme,
            )
        native = self._backend.double_barrier_native()
        if native is not None:
            self._check_open()
            wait = check_timeout(timeout, name=self.name, backend=self._backend.scheme)
            member = ids.new_uuid()
            if native.enter(self.name, self.parties, member, wait):
                self._entered, self._entered_in = (member, ""), forks.generation()
                return True
            return False
        tripped, member, gen = self._arrive(timeout, consume=False)
        if tripped:
            self._entered, self._entered_in = (member, gen), forks.generation()
        return tripped

    def leave(self, timeout: float | None = None) -> bool:
        """Leave and block until every member of this generation has left (or its arrival ran out): True.
        False after ``timeout`` seconds (None: for ever); this member has left all the same."""
        if self._entered is None:
            raise ConfigError(
                "this double barrier was not entered; enter() it first", name=self.name, backend=self._backend.scheme
            )
        if (forked := self._forked()) is not None:
            raise forked  # leaving would take the parent's member off: the others would go on without it
        wait = check_timeout(timeout, name=self.name, backend=self._backend.scheme)
        self._check_open()
        member, gen = self._entered
        self._entered = None
        native = self._backend.double_barrier_native()
        if native is not None:
            return native.leave(self.name, member, wait)
        deadline = Deadline.after(wait)
        with Budget(until=deadline.calls_end()):
            reply = self._step(LEAVE, member, gen)
            while reply.members > 0:
                left = deadline.remaining()
                if left is not None and left <= 0:
                    return False
                rt.sleep(POLL if left is None else min(left, POLL))
                reply = self._step(LEFT, member, gen)
            return True
