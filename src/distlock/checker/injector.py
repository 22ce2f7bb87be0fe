"""The fault injector of ``distlock check``: which faults exist, how long each lasts, and when the next may start.

Faults are injected one at a time, each bounded in time, and only while enough of the run is left to judge
its outcome:

* ``kill``  -- SIGKILL of a worker that is holding the lock (a crash), then a fresh worker is started in its
  place. Measures how long the lock stays unavailable (liveness).
* ``pause`` -- SIGSTOP of a worker while it sleeps inside its critical section, for ``2 * ttl + 0.3 s`` (past
  its lease), then SIGCONT. The resumed worker finishes its writes blindly: the fenced register must reject
  them and the lock must tell the worker it lost the lock.
* ``server-restart`` -- (``--spawn`` only) kill -9 of every server of the spawned deployment, and a restart on
  the same ports and data.
* ``leader-kill`` -- (``--spawn etcd|zookeeper``) kill -9 of the cluster's current leader, restarted after a lease.
* ``failover`` -- (``--spawn redis-sentinel|redis-cluster``) kill -9 of the master serving the run's lock name;
  once its replica is promoted, the killed server starts again a lease later and rejoins as a replica.
* ``partition`` -- (``--spawn etcd|zookeeper``, root) the member listed first in the URL is cut off from its
  peers and the clients (its network namespace's link goes down) for a lease, then healed.
* ``clock-skew`` -- (``--spawn postgres|mysql``) F2 in docs/safety.md: a holder is paused in its critical section, and
  meanwhile the database server's wall clock jumps forward by ``2 * ttl + 1 s`` (libfaketime; on MariaDB the
  jump lands within a second, see ``tools/servers/proc.py``); the holder stays paused for half its lease
  after the jump (which a correct clock would let it survive): its lease expires early, another worker takes
  the lock, and the resumed holder's writes must be rejected by the fenced register.
* ``fork`` -- a holder forks children while it sleeps in its critical section (a pre-fork server's workers, a
  pool's) and waits for them, a lease at most: each leaves the parent's holding as leaving its ``with`` block
  would, takes and releases a lock of its own through the store it inherited, and tries the held lock once
  without waiting (a grant is reported as an operation of its own), then exits. The holder then writes and
  releases as usual: whatever a child did to its holding or its connections shows in the same figures.
* ``freeze``, ``half-open``, ``slow`` -- gray link faults (``gray``): every worker reaches the servers
  through loopback proxies of its own; a holder is made to stay in its critical section (it *lingers* until
  ``lost`` fires), then its proxies stop forwarding silently (``freeze``), drop the connections open now
  (``half-open``: it must reconnect), or forward every chunk ``lease / 3`` late each way (``slow``), for
  ``1.25 * lease + 0.3 s``. The told-late figure (``history.told_late``) judges what the holder was told.
* ``resize`` -- (``--algorithm semaphore``) the semaphore's stored capacity shrinks to half (``set_permits``,
  from this process) for one lease, then is set back (``semaphore.Resizer``).

A fault "lands" when the target was still inside its critical section when the signal arrived (checked from
the state it publishes in shared memory); faults that miss are retried and not counted.

The injector owns no processes: the run loop (``runner``) hands it the workers, their shared state, a way
to start a replacement and a way to hear reports while it waits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from .config import CheckConfig, capacity, lease_of
from .gray import GRAY_FAULTS, Links
from .history import liveness_allowance
from .semaphore import Resizer
from .worker import DONE, FORK, FORKING, HOLD_SLEEP, HOLDING, LINGER

#: how many killed workers may be replaced in one run (the shared state arrays are sized for them)
MAX_RESPAWNS = 200

Step = tuple[float, Callable[[], None]]


def gray_timing(lease: float) -> tuple[float, float, float]:
    """(how long a gray fault lasts, how long its target may linger after it, the ``slow`` delay each way)."""
    return 1.25 * lease + 0.3, 0.5 * lease, lease / 3


class Injector:
    """Injects the faults, one at a time: each is started, then ended by its pending steps (SIGCONT, a
    restart, a heal), and the next one starts only once every step of the current one has run."""

    def __init__(
        self,
        cfg: CheckConfig,
        procs: dict[int, Any],
        states: Any,
        linger: Any,
        links: Links | None,
        faults: list[dict[str, Any]],
        spawn: Callable[[int], None],
        drain: Callable[[float], None],
        progress: Callable[[dict[str, Any]], None] | None,
        name: str = "",
    ) -> None:
        self.cfg, self.procs, self.states, self.linger, self.links = cfg, procs, states, linger, links
        self.faults, self.spawn, self.drain, self.progress = faults, spawn, drain, progress
        self.lease = lease_of(cfg)
        self.pending: list[Step] = []
        #: the ``resize`` fault's connection (``--algorithm semaphore``), opened at its first use
        self.resizer = Resizer(cfg.url, name, capacity(cfg)) if "resize" in cfg.faults else None

    def run(self, started: float, end: float, ops: list[dict[str, Any]]) -> None:
        """Inject faults until ``end``, then end the current one (its pending steps), hearing reports throughout."""
        cfg, lease = self.cfg, self.lease
        kinds = [k for k in cfg.faults if k not in GRAY_FAULTS or self.links is not None]
        turn = 0
        pause_for = 2.0 * lease + 0.3
        down_for = lease  # a killed leader stays down, a partition lasts, this long
        gray_for, gray_linger, _ = gray_timing(lease)
        # leave room after each fault to judge its outcome
        room = {
            "kill": liveness_allowance(lease) + 0.5,
            "pause": pause_for + 0.5,
            "server-restart": lease + 1.0,
            "leader-kill": down_for + lease + 1.0,
            "failover": down_for + lease + 6.0,  # the promotion takes seconds, then the old master rejoins
            "partition": down_for + lease + 1.0,
            "clock-skew": lease / 2 + 2.0,  # the jump lands within 1 s; the resumed holder writes at once
            "fork": max(5.0, 2.0 * cfg.ttl) + lease + 0.5,
            "resize": lease + 1.0,  # the holder waits for its children that long at most
            **{k: gray_for + gray_linger + lease + 0.5 for k in GRAY_FAULTS},
        }
        next_at = started + min(0.3, cfg.seconds / 10)
        last_progress = 0.0
        try:
            while True:
                now = time.monotonic()
                if now >= end and not self.pending:
                    return
                self.drain(0.002)
                now = time.monotonic()
                if self.progress is not None and now - last_progress > 0.25:
                    last_progress = now
                    self.progress({"elapsed": now - started, "acquisitions": len(ops), "faults": len(self.faults)})
                if self.pending:
                    if now >= self.pending[0][0]:
                        self.pending.pop(0)[1]()
                        if not self.pending:
                            next_at = time.monotonic() + 0.3
                    continue
                if not kinds or now < next_at:
                    continue
                kind = kinds[turn % len(kinds)]
                if now + room[kind] > end:
                    continue
                result = self.inject(kind)
                if result is not None:
                    turn += 1
                    if result > 0:
                        next_at = time.monotonic() + result
        finally:
            for _, step in self.pending:  # a run cut short still heals, resumes and restarts what it broke
                with contextlib.suppress(Exception):
                    step()
            self.pending = []
            if self.resizer is not None:
                self.resizer.close()

    def inject(self, kind: str) -> float | None:
        """Start one fault; None if it could not land now (retried), else the pause before the next one."""
        cfg, lease, procs, states, server = self.cfg, self.lease, self.procs, self.states, self.cfg.server
        if kind in ("server-restart", "leader-kill", "failover", "partition"):
            assert server is not None
            t = time.monotonic()
            if kind == "server-restart":
                server.restart()
                self.faults.append({"kind": kind, "t": t, "worker": -1, "landed": True})
                return time.monotonic() - t + lease + 0.5
            if kind == "failover":
                undo = server.failover()  # returns once the replica is promoted
                self.pending = [(time.monotonic() + lease, undo)]
                self.faults.append({"kind": kind, "t": t, "worker": -1, "landed": True})
                return 0.0
            undo = server.kill_leader() if kind == "leader-kill" else server.partition()
            self.pending = [(t + lease, undo)]
            self.faults.append({"kind": kind, "t": t, "worker": -1, "landed": True})
            return 0.0
        if kind == "resize":
            return self.inject_resize()
        if kind in GRAY_FAULTS:
            return self.inject_gray(kind)
        if kind == "fork":
            return self.inject_fork()
        wanted = (HOLDING, HOLD_SLEEP) if kind == "kill" else (HOLD_SLEEP,)
        target = next((i for i, p in procs.items() if states[i] in wanted and p.is_alive()), None)
        if target is None:
            return None
        proc = procs[target]
        if kind == "kill":
            if len(procs) >= cfg.workers + MAX_RESPAWNS:
                return None
            t = time.monotonic()
            proc.kill()
            proc.join(10)
            landed = states[target] in wanted  # a dead process cannot change its state any more
            states[target] = DONE
            self.faults.append({"kind": "kill", "t": t, "worker": target, "landed": landed})
            if self.links is not None:
                self.links.retire(target)
            self.spawn(max(procs) + 1)
            return lease + 0.5 if landed else None
        t = time.monotonic()
        os.kill(proc.pid, signal.SIGSTOP)
        if states[target] != HOLD_SLEEP:
            os.kill(proc.pid, signal.SIGCONT)  # missed the critical section; try again
            return None
        if kind == "pause":
            pause_for = 2.0 * lease + 0.3
            self.faults.append({"kind": kind, "t": t, "worker": target, "landed": True, "seconds": pause_for})
            self.pending = [(t + pause_for, self.resume(target))]
        else:  # clock-skew: a pause the lease survives, and the server's clock jumps past the lease meanwhile
            assert server is not None
            skew_pause, skew_jump = lease / 2, 2.0 * cfg.ttl + 1.0
            server.skew_clock(skew_jump)  # returns once the server shows the jump (up to 1 s on MariaDB)
            # the pause is counted from then: the waiters that look again within it must see the jump
            jumped = time.monotonic()
            self.faults.append(
                {"kind": kind, "t": t, "worker": target, "landed": True, "seconds": jumped - t + skew_pause,
                 "jump_s": skew_jump}
            )  # fmt: skip
            self.pending = [(jumped + skew_pause, self.resume(target))]
        return 0.0

    def inject_resize(self) -> float | None:
        """The semaphore's capacity shrinks for one lease, then comes back (``semaphore.Resizer``)."""
        assert self.resizer is not None
        resizer = self.resizer
        record: dict[str, Any] = {"kind": "resize", "t": time.monotonic(), "worker": -1}
        resizer.shrink(record)
        self.faults.append(record)
        self.pending = [(record["t"] + self.lease, lambda: resizer.restore(record))]
        return 0.0

    def resume(self, index: int) -> Callable[[], None]:
        def cont() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.procs[index].pid, signal.SIGCONT)

        return cont

    def inject_fork(self) -> float | None:
        """A holder forks children that use the store they inherit, while it holds the lock."""
        states, linger = self.states, self.linger
        target = next((i for i, p in self.procs.items() if states[i] == HOLD_SLEEP and p.is_alive()), None)
        if target is None:
            return None
        t = time.monotonic()
        linger[target] = FORK
        # it sees the flag when its sleep in the critical section ends (at most --hold from now)
        give_up = t + self.cfg.hold + 0.5
        while states[target] != FORKING and linger[target] == FORK and time.monotonic() < give_up:
            time.sleep(0.001)
        if states[target] != FORKING and linger[target] == FORK:
            linger[target] = 0  # it left the critical section first; try again
            return None
        self.faults.append({"kind": "fork", "t": t, "worker": target, "landed": True})
        return 0.5

    def inject_gray(self, kind: str) -> float | None:
        """A holder stays in its critical section (it lingers until ``lost`` fires), then its links break."""
        assert self.links is not None
        states, linger = self.states, self.linger
        target = next(
            (
                i
                for i, p in self.procs.items()
                if states[i] == HOLD_SLEEP and p.is_alive() and i in self.links.by_worker
            ),
            None,
        )
        if target is None:
            return None
        linger[target] = 1
        # it sees the flag when its sleep in the critical section ends (at most --hold from now)
        give_up = time.monotonic() + self.cfg.hold + 0.5
        while states[target] != LINGER and time.monotonic() < give_up:
            time.sleep(0.001)
        if states[target] != LINGER:
            linger[target] = 0  # it left the critical section first; try again
            return None
        links = self.links[target]
        gray_for, gray_linger, slow_by = gray_timing(self.lease)
        t = time.monotonic()
        record: dict[str, Any] = {"kind": kind, "t": t, "worker": target, "landed": True, "seconds": gray_for}
        if kind == "freeze":
            links.freeze()
        elif kind == "half-open":
            record["connections"] = links.half_open()
            record["landed"] = record["connections"] > 0
        else:
            links.slow(slow_by)
            record["delay_s"] = slow_by
        self.faults.append(record)

        def stop_lingering() -> None:
            linger[target] = 0

        self.pending = [(t + gray_for, links.heal), (t + gray_for + gray_linger, stop_lingering)]
        return 0.0
