"""What the peer benchmarks share: one adapter shape for every library's lock, measured by ``distlock bench``'s own
code (src/distlock/benchmark/measure.py), so a peer's figures and distlock's come from the same loops and clocks.

A library is a :class:`Lib`: built from the deployment's URL, ``lock(name)`` gives ``(acquire, release)`` (acquire
blocks until it holds the lock), ``close()`` lets go of its connections. The hand-off and contention workers are
separate processes (spawned), which build their own ``Lib`` from a :class:`PeerLocks` (the class and the URL).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distlock.benchmark import measure

Pair = tuple[Callable[[], None], Callable[[], None]]  # (acquire, release) of one lock

#: every peer's lease where it takes one: long enough never to expire inside a measurement
TTL = 30.0


class Lib:
    name = ""  # the row's label
    key = ""  # what --only / --libs select it by
    ours = False  # a distlock row (the others are the peers it is compared with)
    #: a floor, not a lock (bare round trips that exclude nobody): measured uncontended only, never a "peer"
    floor = False

    def __init__(self, url: str) -> None:
        self.url = url

    def lock(self, name: str) -> Pair:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _Held:
    """A (acquire, release) pair as the lock object measure.py's loops expect."""

    def __init__(self, pair: Pair) -> None:
        self._acquire, self.release = pair

    def acquire(self, timeout: float | None = None) -> bool:
        self._acquire()  # the adapters wait up to a minute and assert they got it: no peer needs a timeout here
        return True


@dataclass(frozen=True)
class PeerLocks:
    """A :class:`~distlock.benchmark.measure.LockSource` of one library: picklable, built anew in each worker."""

    cls: type[Lib]
    url: str

    @contextlib.contextmanager
    def __call__(self, name: str, ttl: float) -> Iterator[_Held]:
        lib = self.cls(self.url)
        try:
            yield _Held(lib.lock(name))
        finally:
            lib.close()


def uncontended(libs: list[Lib], seconds: float) -> list[dict[str, Any]]:
    """Each library's acquire + release loop in one process, in interleaved slices (``seconds`` each in total)."""
    held = [_Held(lib.lock(f"u-{uuid.uuid4().hex[:8]}")) for lib in libs]
    for h in held:
        for _ in range(20):  # warm up: connections, script caches, leases, parent nodes
            h.acquire()
            h.release()
    sides = [lambda s, lat, h=h: measure.sync_pairs(h, s, lat) for h in held]
    return measure.interleave(sides, seconds)


def handoff(cls: type[Lib], url: str, seconds: float) -> dict[str, Any]:
    """Two processes taking strict turns on one lock, each holding it 3 ms (measure.handoff)."""
    return measure.handoff(PeerLocks(cls, url), seconds, TTL)


def contention(cls: type[Lib], url: str, seconds: float, workers: int = 8) -> dict[str, Any]:
    """``workers`` processes looping acquire + release on one lock (measure.contention)."""
    return measure.contention(PeerLocks(cls, url), seconds, TTL, workers)


class Distlock(Lib):
    """distlock itself on the deployment's URL (``query`` adds backend options, e.g. ``mode=session``)."""

    name = "distlock"
    key = "distlock"
    ours = True
    query = ""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import distlock

        sep = "&" if "?" in url else "?"
        self.store = distlock.connect(f"{url}{sep}{self.query}" if self.query else url)

    def lock(self, name: str) -> Pair:
        lk = self.store.lock(f"bench/{name}", ttl=TTL)

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release

    def close(self) -> None:
        self.store.close()


def alternate(script: str, trees: list[Path], jobs: list[tuple[str, list[str]]], rounds: int) -> None:
    """Run ``script`` (a path) once per round, job and tree, in a child that imports distlock and the benchmark
    helpers from the tree (a checkout's root with ``src/`` and ``benchmarks/``), and print the child's line.
    A job is a label and the script's arguments. The trees take turns run by run, so a busy machine disturbs
    them alike."""
    for n in range(rounds):
        for label, argv in jobs:
            for tree in trees:
                env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'src'}"}
                out = subprocess.run(
                    [sys.executable, script, *argv], env=env, cwd=tree, capture_output=True, text=True, check=False
                )
                line = out.stdout.strip() or f"failed: {out.stderr.strip().splitlines()[-1:]}"
                print(f"round {n + 1} {label} {tree}: {line}", flush=True)
