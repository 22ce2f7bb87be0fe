"""A lock-holding child process for the multi-process and fault tests (``python -m tests.proc_worker ...``).

Modes:
  counter URL NAME N WORKDIR ID  -- N times: acquire, read-modify-write WORKDIR/counter, log (start, end, fence)
  latch URL NAME COUNT           -- create the latch NAME with COUNT, count down once, print "COUNTED <n>", then
                                    sleep until killed
  barrier URL NAME PARTIES TTL   -- print "ARRIVING", then wait at the barrier NAME (until killed)
  semaphore URL NAME PERMITS WANT TTL -- take WANT permits of the semaphore NAME (capacity PERMITS), print
                                    "ACQUIRED <fence>", then sleep until killed
  hold URL NAME TTL WORKDIR      -- acquire, print "ACQUIRED <fence>", wait until WORKDIR/stop exists, then print
                                    "LOST <0|1>" and "RELEASE <ok|LockLost|NotHeld>" and exit
Lines go to stdout, flushed, so the test can follow along.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import distlock


def counter(url: str, name: str, n: int, workdir: Path, ident: str) -> None:
    log = workdir / f"log-{ident}"
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=10)
        lines = []
        for _ in range(n):
            assert lock.acquire(timeout=60)
            start = time.monotonic()
            path = workdir / "counter"
            value = int(path.read_text() or "0")
            time.sleep(0.001)
            path.write_text(str(value + 1))
            end = time.monotonic()
            lines.append(f"{start!r} {end!r} {lock.fence}\n")
            lock.release()
        log.write_text("".join(lines))


def hold(url: str, name: str, ttl: float, workdir: Path) -> None:
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=ttl)
        assert lock.acquire(timeout=30)
        print(f"ACQUIRED {lock.fence}", flush=True)
        while not (workdir / "stop").exists():
            time.sleep(0.02)
        # give the renewer (or the session watcher) a moment to notice what happened while we were stopped
        lock.lost.wait(15.0)
        print(f"LOST {int(lock.lost.is_set())}", flush=True)
        try:
            lock.release()
            outcome = "ok"
        except distlock.LockLost:
            outcome = "LockLost"
        except distlock.NotHeld:
            outcome = "NotHeld"
        print(f"RELEASE {outcome}", flush=True)


def latch(url: str, name: str, count: int) -> None:
    store = distlock.connect(url)
    print(f"COUNTED {store.latch(name, count=count).count_down()}", flush=True)
    while True:
        time.sleep(1)


def semaphore(url: str, name: str, permits: int, want: int, ttl: float) -> None:
    store = distlock.connect(url)
    sem = store.semaphore(name, permits=permits, ttl=ttl)
    assert sem.acquire(timeout=30, permits=want)
    print(f"ACQUIRED {sem.fence}", flush=True)
    while True:
        time.sleep(1)


def barrier(url: str, name: str, parties: int, ttl: float) -> None:
    store = distlock.connect(url)
    print("ARRIVING 1", flush=True)
    store.barrier(name, parties, ttl=ttl).wait(timeout=600)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "counter":
        counter(args[0], args[1], int(args[2]), Path(args[3]), args[4])
    elif mode == "latch":
        latch(args[0], args[1], int(args[2]))
    elif mode == "semaphore":
        semaphore(args[0], args[1], int(args[2]), int(args[3]), float(args[4]))
    elif mode == "barrier":
        barrier(args[0], args[1], int(args[2]), float(args[3]))
    elif mode == "hold":
        hold(args[0], args[1], float(args[2]), Path(args[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")
