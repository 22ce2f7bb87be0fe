# GENERATED from src/distlock/_async/backend.py by scripts/gen_sync.py: edit that file, not this one.
"""What a backend is: a few atomic, single-attempt operations. Everything else is written once above it.

A backend lives in its folder ``_backends/<name>/`` (MySQL and PostgreSQL share ``_backends/sql/``), whose
async package exports ``class Backend(AsyncBackend)`` with an ``AsyncAttempt`` subclass for its acquisitions, has
one row in ``_registry.py``, and is turned into its sync twin by ``scripts/gen_sync.py`` (docs/design.md).
The lock objects (``locks.py``) and the store (``store.py``) do blocking with deadlines, reentrancy,
renewal, the lost signal and bookkeeping; a backend only answers:

* ``attempt(claim).try_acquire()``  one try; a ``Grant`` says acquired (+ fence) or not (+ a hint).
* ``attempt.wait(grant, timeout)``   block until something changed that may let us in (push), or timeout.
* ``attempt.abandon()``              after a failed, timed-out, cancelled or errored acquire: delete every
                                      trace of this claim (queue entry, a holding whose reply was lost, its
                                      lease). Must be idempotent and safe to call in any state (F10 in docs/safety.md).
* ``release(claim)``                 compare-and-delete by token; False if it was no longer held.
* ``renew(claims)``                  extend many leases in one round trip per tick; one bool per claim.
* ``holds(claim)``                   is this claim still a live holder (``owned()``)?
* ``shorten(claim, ttl)``            at-most-once jobs (``once.py``): let the holding end ``ttl`` seconds from
                                      now on the server's clock instead of releasing it, only if ``claim``
                                      still holds; then the store forgets it (no renewal, no release, no
                                      ``lost``). Backends with no lease per holding (ZooKeeper, SQL session
                                      modes) keep the default, which raises ``UnsupportedFeature``.
* ``inspect`` / ``list`` / ``break_lock`` for admin and the CLI.
* ``watch_prefix(prefix)``          a ``AsyncPrefixWatch`` that tells ``distlock list --watch`` when the
                                      held locks under a prefix may have changed (default: a short poll).

Count-down latches (``latch.py``, the record's rules in ``_core/latch.py``) take three more calls, each one
atomic step on the latch's own record, kept apart from every lock's keys; a backend without them keeps the
defaults, whose ``latch_refused`` reason ``store.latch`` raises as ``UnsupportedFeature``:

* ``latch_open(name, count, round_id)`` the record of ``name``; with a ``count``, first created with it (and the
                                      new ``round`` id) unless one exists. An expired done marker is absent.
* ``latch_count_down(name, round_id, step, linger)``  one off the record if it is still of ``round_id`` and
                                      above 0; the step that reaches 0 leaves the done marker for ``linger``
                                      seconds and wakes the name's latch watchers. The count after (0: gone, or
                                      another round). ``step`` is the call's own id: a request sent again after
                                      a lost reply must not count twice (the record keeps the last steps' ids).
* ``latch_watch(name)``             a ``AsyncWatch`` woken when the latch reaches zero (push where the
                                      backend has it; default: a short poll), armed before it is returned.

Barriers (``barrier.py``, the record's rules in ``_core/barrier.py``) are one record per name and kind, kept apart
from every lock's and latch's keys, stepped by ``barrier_step(kind, name, op)``: by default a read
(``barrier_read``) and a compare-and-set (``barrier_cas``) of the whole record, which a backend answers, or a
transaction of its own (SQLite). ``barrier_refused(kind)`` says why a backend has none (``UnsupportedFeature``).

Semaphores (``Mode.SEMAPHORE``; the rule in ``_core/arbiter.py``): a claim takes ``claim.want`` permits all or
nothing as one holding; ``claim.permits`` is the capacity its user declared (None: follow the stored one). While a
semaphore has a live holder or waiter the backend keeps its two numbers (``arbiter.Capacity``: declared and in
force) and refuses a claim that does not fit them with ``ConfigError`` (``arbiter.terms``: its messages); the
last release or abandon removes them. ``set_permits(name, n)`` changes the one in force. ``inspect`` reports
each holder's ``permits`` and the semaphore's (``LockInfo.weighed``).

Elections (``capabilities.elections``, ``election.py``) are exclusive fair claims that carry a ``value``: the
backend stores it with the holding (and reports it as ``HolderInfo.value``), and answers two more calls:

* ``proclaim(claim, value)``         replace the value, atomically with a check that ``claim`` still holds;
                                      False if it does not.
* ``watch(name)``                    a ``AsyncWatch`` that tells an observer when the name's holder or
                                      value may have changed (push where the backend has it).

A backend with a session instead of per-lock leases (ZooKeeper) sets ``needs_renewal=False`` in its
capabilities and tells the store when its session may end through ``lease_end(claim)``. A backend with leases
may answer ``lease_end(claim)`` too, with its own count of the holding's lease where it can be tighter than the
store's (etcd: the holding's own etcd lease, which may be a pooled one confirmed before the acquire started).
Any backend reports a holding it learned is gone (a session expired, a lease revoked, a key deleted) by
calling ``self.lost(token, reason)`` from any thread.

Revocation: ``request_release(name, reason)`` asks the current holders of a name to let go (it writes a request
next to each holding, never releases anything; False, and nothing written, when nobody holds it). A holder
learns of a request pushed (a watch) or carried back by its renewal's reply, and tells the store with
``self.revoked(token, request, reason)`` from any thread; ``request`` identifies the request, so the same
request read again (each renewal returns it until the holding ends) is told once. The record goes with the
holding (deleted by its release, or ends with its lease) and lives in the name's own keys.

Every network call a backend makes is bounded in time (connect, read, write, statement). ``renew`` may be
cancelled by the store when the earliest lease in its batch runs out; a connection whose call timed out or
was cancelled is closed, never reused (its reply may still arrive and would be read as the next call's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import _rt_sync as rt
from .._core import barrier, forks
from .._core.latch import LatchState
from .._core.timing import monotonic, wall_ms
from .._core.types import Capabilities, Claim, Grant, LockInfo, PrimitiveInfo
from .._errors import BackendError, UnsupportedFeature
from .._url import StoreConfig


def told(backend: SyncBackend, claims: Sequence[Claim], renewed: Sequence[tuple[bool, str | None]]) -> list[bool]:
    """Renewal results that carry the release request made to each holder ("<id>|<reason>", or None, as the SQL
    backends keep it): the requests are told (``AsyncBackend.revoked``), the results returned."""
    out = []
    for claim, (ok, asked) in zip(claims, renewed, strict=True):
        if ok and asked:
            request, _, reason = asked.partition("|")
            backend.revoked(claim.token, request, reason)
        out.append(ok)
    return out


class SyncAttempt:
    """State of one acquisition from the first try to success or abandonment."""

    def __init__(self, backend: SyncBackend, claim: Claim) -> None:
        self.backend = backend
        self.claim = claim

    def try_acquire(self) -> Grant:
        raise NotImplementedError

    def try_late(self) -> Grant:
        """The look after a wait that ended at the acquire's deadline: its answer counts even though the
        deadline has passed, so it must not wait for anything. This default is the ordinary try, for
        backends whose wait may itself have taken the lock (a blocking server-side lock call) or whose try
        reads what the wait learned; where a try is a write on the name's lock, a crowd of waiters timing out
        together would queue up on it past their deadlines, and the backend only takes what it was already
        given (an SQL lease hand-over)."""
        return self.try_acquire()

    def wait(self, grant: Grant, timeout: float | None) -> None:
        raise NotImplementedError

    def abandon(self) -> None:
        raise NotImplementedError


class NativeDoubleBarrier:
    """A double barrier a backend runs with its own protocol (``double_barrier_native``): ``enter`` and
    ``leave`` of the member ``member`` (a UUID), each bounded by its ``timeout`` (None: for ever)."""

    def enter(self, name: str, parties: int, member: str, timeout: float | None) -> bool:
        raise NotImplementedError

    def leave(self, name: str, member: str, timeout: float | None) -> bool:
        raise NotImplementedError


class SyncWatch:
    """An observer's wake-up for one name: ``wait`` returns when something about the name may have
    changed since the previous return (or since the watch was made), or after ``timeout``. Spurious returns
    are fine (the observer reads the name again and compares); a missed change is not, so a backend's
    watch is armed before the observer's first read.

    This default has no push: it returns after ``POLL`` seconds at most."""

    #: how often an observer without push reads the name again
    POLL = 0.25

    def wait(self, timeout: float) -> None:
        rt.sleep(max(0.0, min(timeout, self.POLL)))

    def close(self) -> None:
        return None


class SyncPrefixWatch:
    """What ``distlock list --watch`` waits on: ``wait`` says whether the locks whose names start with a
    prefix may have changed, so that the watcher reads them again only then. True may be spurious (it costs
    one read); a change must never go unreported, so a backend's watch is armed before it is returned.

    This default has no push: it says "read again" every ``POLL`` seconds, whatever happened."""

    #: how often the locks under a prefix are read again where the backend has no prefix push
    POLL = 0.5

    def __init__(self) -> None:
        self._next = monotonic() + self.POLL

    def wait(self, timeout: float) -> bool:
        """Until something under the prefix may have changed (True) or ``timeout`` passed (False)."""
        left = self._next - monotonic()
        if left > timeout:
            rt.sleep(max(0.0, timeout))
            return False
        rt.sleep(max(0.0, left))
        self._next = monotonic() + self.POLL
        return True

    def close(self) -> None:
        return None


class SyncBackend:
    """Base class of every backend. Subclasses set ``capabilities`` and implement the operations."""

    capabilities = Capabilities()
    #: its ``after_fork`` forgets every connection and session of the parent's, so that closing a forked
    #: child's copy of the store closes only the child's own (the store leaves the others' alone in a child)
    fork_owned = False
    #: its holdings live in this process only (``memory://``): nothing to release when the process exits
    in_process = False

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.scheme = config.scheme
        self._loss_handler: Callable[[str, str], None] | None = None
        self._revoke_handler: Callable[[str, str, str], None] | None = None
        forks.track(self)

    def after_fork(self) -> None:
        """In a forked child, before any other thread runs there (``_core/forks.py``): the connections,
        sessions, workers and guards are the parent's. A backend that keeps any forgets them here, without a
        word to the server (``forks.abandon``), and makes its own on first use: the child locks through the
        store it inherited at once, and the parent's sessions, leases and locks are untouched. Each class
        that keeps state extends this and calls ``super().after_fork()``."""

    @classmethod
    def open(cls, config: StoreConfig) -> SyncBackend:
        """Connect (with a bounded timeout: an unreachable host raises BackendError, never hangs)."""
        raise NotImplementedError

    # -- called by the store -------------------------------------------------------------------------
    def set_loss_handler(self, handler: Callable[[str, str], None]) -> None:
        self._loss_handler = handler

    def set_revoke_handler(self, handler: Callable[[str, str, str], None]) -> None:
        self._revoke_handler = handler

    def revoked(self, token: str, request: str, reason: str) -> None:
        """A holding got a release request (``request`` identifies it, ``reason`` is its text). Any thread."""
        if self._revoke_handler is not None:
            self._revoke_handler(token, request, reason)

    def lease_end(self, claim: Claim) -> float | None:
        """The backend's own count of when the holding of ``claim`` may already have ended on the server, as
        far as this process can tell (monotonic), or ``None``. ZooKeeper: the session's end -- the send time of
        the last request the server answered, plus the session timeout, minus ``drift_margin``. etcd: the end
        of the holding's own etcd lease -- the send time of the last keepalive (or grant) the server confirmed,
        plus the TTL it granted, minus ``drift_margin``; the store renews that lease, and this is tighter than
        the store's count when a pooled lease was confirmed before the acquire started. The store's lease
        clock fires ``lost`` at the earlier of this and its own lease end, whatever I/O is in flight, and reads
        it again when it wakes (renewals move it forward). ``None``: the store's own count governs.
        """
        return None

    def lease_span(self, claim: Claim) -> float | None:
        """Session backends: the length of the session deadline ``lease_end`` counts (ZooKeeper's granted
        session timeout), for the ``at_risk`` share; None: the holding's own lease (its TTL; etcd's too)."""
        return None

    def lost(self, token: str, reason: str) -> None:
        """A backend learned that a holding is gone (session expired, lease revoked). Any thread."""
        if self._loss_handler is not None:
            self._loss_handler(token, reason)

    def name_refused(self, name: str) -> str | None:
        """Why this backend's layout cannot keep ``name`` apart from every other name and from the store's own
        keys (a one-line reason that says what to change), or None. Asked when a lock object is built and by
        the admin calls, after the checks every backend shares (``_core/validate.py``)."""
        return None

    # -- the operations ------------------------------------------------------------------------------
    def attempt(self, claim: Claim) -> SyncAttempt:
        raise NotImplementedError

    def release(self, claim: Claim) -> bool:
        raise NotImplementedError

    def renew(self, claims: Sequence[Claim]) -> list[bool]:
        raise NotImplementedError

    def holds(self, claim: Claim) -> bool:
        raise NotImplementedError

    def shorten(self, claim: Claim, ttl: float) -> bool:
        """At-most-once jobs: the holding of ``claim`` now ends ``ttl`` seconds from now, counted by the server
        where it keeps the lease; atomic with a check that ``claim`` still holds (never another owner's
        holding); False if it no longer does. The backend keeps nothing of the holding afterwards.
        ``UnsupportedFeature``: no lease per holding on the server (the caller holds on in the process)."""
        raise UnsupportedFeature("no server-side lease to shorten", name=claim.name, backend=self.scheme)

    def inspect(self, name: str) -> LockInfo | None:
        raise NotImplementedError

    def set_permits(self, name: str, permits: int) -> bool:
        """Semaphores: make ``permits`` the stored capacity in force of ``name`` if it is in use (a live holder or
        waiter; its declared number stays), and wake its waiters; True. False, and nothing written, for a free
        name. Holders above the new capacity keep their permits."""
        raise UnsupportedFeature("resizing a semaphore (set_permits) is not supported here", name=name, backend=self.scheme)

    def proclaim(self, claim: Claim, value: str) -> bool:
        """Elections: store ``value`` as the holding's value if ``claim`` still holds; False if it does not."""
        raise NotImplementedError

    def watch(self, name: str) -> SyncWatch:
        """Elections: a watch on ``name``, armed before it is returned (see ``AsyncWatch``)."""
        return SyncWatch()

    def list(self, prefix: str) -> list[LockInfo]:
        raise NotImplementedError

    def watch_prefix(self, prefix: str) -> SyncPrefixWatch:
        """``distlock list --watch``: a watch on every name starting with ``prefix`` (a poll by default)."""
        return SyncPrefixWatch()

    def break_lock(self, name: str) -> bool:
        raise NotImplementedError

    # -- count-down latches (see the module docstring) ---------------------------------------------------
    def list_primitives(self, prefix: str) -> Sequence[PrimitiveInfo] | None:
        """The latches and barriers whose names start with ``prefix`` (``distlock list``); None where the
        backend cannot list them."""
        return None

    def latch_refused(self) -> str | None:
        """Why this backend has no count-down latches (a one-line reason), or None when it has them."""
        return "count-down latches are not supported on this backend"

    def latch_open(self, name: str, count: int | None, round_id: str) -> LatchState | None:
        raise UnsupportedFeature(self.latch_refused() or "no latches", name=name, backend=self.scheme)

    def latch_count_down(self, name: str, round_id: str, step: str, linger: float) -> int:
        raise UnsupportedFeature(self.latch_refused() or "no latches", name=name, backend=self.scheme)

    def latch_watch(self, name: str) -> SyncWatch:
        return SyncWatch()

    # -- barriers (see the module docstring) -----------------------------------------------------------------
    def barrier_refused(self, kind: str) -> str | None:
        """Why this backend has no barriers of ``kind`` (``"barrier"`` or ``"double barrier"``; a one-line
        reason), or None when it has them."""
        return f"{kind}s are not supported on this backend"

    def barrier_step(self, kind: str, name: str, op: barrier.Op) -> barrier.Reply:
        """Apply ``op`` to the barrier record of ``kind`` and ``name`` atomically: by default read it and write
        it back with a compare-and-set, again on a conflict."""
        while True:
            data, version = self.barrier_read(kind, name)
            try:
                record = barrier.decode(data)
            except ValueError:
                raise BackendError(
                    f"the {kind} record of this name holds data distlock did not write; remove it or use another name",
                    name=name,
                    backend=self.scheme,
                ) from None
            now = wall_ms()
            after, reply = barrier.step(record, op, now)
            if barrier.encode(after) == barrier.encode(record):
                return reply  # nothing to write (a look at a tripped marker it does not consume, a count)
            if self.barrier_cas(kind, name, version, barrier.encode(after), barrier.keep_ms(after, now)):
                return reply

    def double_barrier_native(self) -> NativeDoubleBarrier | None:
        """A backend's own double barrier protocol (ZooKeeper: Curator's), or None to use the records."""
        return None

    def barrier_read(self, kind: str, name: str) -> tuple[bytes | str | None, object]:
        """The barrier record's data (None: none) and what ``barrier_cas`` compares against."""
        raise UnsupportedFeature(self.barrier_refused(kind) or "no barriers", name=name, backend=self.scheme)

    def barrier_cas(self, kind: str, name: str, version: object, data: str | None, keep_ms: int) -> bool:
        """Write ``data`` (None: delete) if the record is still at ``version``; the server may drop it after
        ``keep_ms``. False on a conflict."""
        raise UnsupportedFeature(self.barrier_refused(kind) or "no barriers", name=name, backend=self.scheme)

    def request_release(self, name: str, reason: str) -> bool:
        """Ask every current holder of ``name`` to release it (a request next to each holding); True if there
        was a holder to ask. Writes nothing for a free name; releases nothing."""
        raise UnsupportedFeature("release requests are not supported here", name=name, backend=self.scheme)

    def close(self) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        """The URL with credentials redacted (for repr and messages)."""
        return self.config.redacted
