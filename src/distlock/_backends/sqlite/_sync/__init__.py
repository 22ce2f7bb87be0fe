# GENERATED from src/distlock/_backends/sqlite/_async/__init__.py by scripts/gen_sync.py: edit that file, not this one.
"""Embedded backends: ``sqlite://`` (a file, correct across processes on one host) and ``memory://``.

Every operation is one short ``BEGIN IMMEDIATE`` transaction (the database write lock is taken up front,
so no two processes can both see a free lock and both take it), in WAL mode with a busy timeout. The
grant rule is ``distlock._core.arbiter``. Expiry uses the wall clock (``time.time()``): every process
on the host shares it. Schema (created on first use, idempotent): see ``queries.py``.

``Backend`` (the registry's entry) opens a store (``db.Db``) and answers the backend contract with the
folder's parts (the map is the folder's ``__init__.py``): ``attempt.py`` for acquisitions and observers, and
every operation (``ops.Ops``) through ``calls.call``. ``memory://`` is the same code on one in-memory database
per process and side.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .... import _rt_sync as rt
from ...._sync.backend import SyncBackend, SyncWatch, told
from ...._core import barrier as rules
from ...._core import ids
from ...._core.latch import LatchState
from ...._core.types import Capabilities, Claim, LockInfo, Mode, PrimitiveInfo, primitive_infos
from ...._url import StoreConfig
from .. import barrier, latch
from ..db import Db
from ..ops import Ops
from ..wake import WakeDir
from .attempt import Attempt, Watch
from .calls import call
from .ears import PROCESS


class Backend(SyncBackend):
    capabilities = Capabilities(modes=frozenset(Mode), fair=True, needs_renewal=True, elections=True, downgrade=True)
    fork_owned = True

    def __init__(self, config: StoreConfig, db: Db) -> None:
        super().__init__(config)
        self.db = db
        self.in_process = not db.owns
        self.ops = Ops(db, PROCESS, WakeDir(db.key, db.shared) if db.owns else None)

    @property
    def db_key(self) -> str:
        """The database: the file's resolved path (``distlock status`` shows it), or ``memory:PID``."""
        return self.db.key

    @classmethod
    def open(cls, config: StoreConfig) -> Backend:
        busy = config.pop_float("busy_timeout", 10.0)
        config.reject_unknown()
        if config.backend == "memory":
            return cls(config, Db.memory(PROCESS, config.scheme))
        path = Path(config.path).expanduser()
        return cls(config, rt.offload(Db.open_file, PROCESS, config.scheme, path, busy))

    def after_fork(self) -> None:
        """The connection is the parent's: ``Db.after_fork``."""
        super().after_fork()
        self.db.after_fork()

    def attempt(self, claim: Claim) -> Attempt:
        return Attempt(self, claim)

    def release(self, claim: Claim) -> bool:
        return call(self.db, self.ops.release, claim)

    def renew(self, claims: Sequence[Claim]) -> list[bool]:
        return told(self, claims, call(self.db, self.ops.renew, claims))

    def request_release(self, name: str, reason: str) -> bool:
        return call(self.db, self.ops.request_release, name, f"{ids.new_token()[:12]}|{reason}")

    def holds(self, claim: Claim) -> bool:
        return call(self.db, self.ops.holds, claim)

    def shorten(self, claim: Claim, ttl: float) -> bool:
        return call(self.db, self.ops.shorten, claim, ttl)

    def inspect(self, name: str) -> LockInfo | None:
        found = call(self.db, self.ops.inspect, [name])
        return found[0] if found else None

    def set_permits(self, name: str, permits: int) -> bool:
        return call(self.db, self.ops.set_permits, name, permits)

    def list(self, prefix: str) -> list[LockInfo]:
        return call(self.db, self.ops.inspect, None, prefix)

    def proclaim(self, claim: Claim, value: str) -> bool:
        return call(self.db, self.ops.proclaim, claim, value)

    def watch(self, name: str) -> SyncWatch:
        return Watch(self, name)

    def break_lock(self, name: str) -> bool:
        tokens = call(self.db, self.ops.break_lock, name)
        for token in tokens:
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

    def list_primitives(self, prefix: str) -> Sequence[PrimitiveInfo] | None:
        latches = call(self.db, latch.listing, self.ops)
        return primitive_infos(latches, call(self.db, barrier.listing, self.ops), prefix)

    def latch_refused(self) -> str | None:
        return None

    def latch_open(self, name: str, count: int | None, round_id: str) -> LatchState | None:
        return call(self.db, latch.open_latch, self.ops, name, count, round_id)

    def latch_count_down(self, name: str, round_id: str, step: str, linger: float) -> int:
        return call(self.db, latch.count_down, self.ops, name, round_id, step, linger)

    def latch_watch(self, name: str) -> SyncWatch:
        return Watch(self, latch.wake_name(name))

    def barrier_refused(self, kind: str) -> str | None:
        return None

    def barrier_step(self, kind: str, name: str, op: rules.Op) -> rules.Reply:
        return call(self.db, barrier.step, self.ops, kind, name, op)

    def close(self) -> None:
        if self.db.owns:
            rt.offload(self.db.locked, self.db.close)
