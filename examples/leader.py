"""One scheduler among N instances: leader election with a term that fences its writes.

Each instance campaigns in the election "scheduler"; the leader runs rounds, writing each with its term to a
shared ledger that refuses a term older than one it has seen. The simulation kills the first leader with
SIGKILL mid-round (no resign): the next instance in line becomes leader once the dead one's lease ends, with a
higher term, and carries on. An observer prints every change of leader.

    python examples/leader.py                     # 3 simulated instances on a temporary SQLite store
    python examples/leader.py --url etcd://...    # the same across real hosts: one store URL for all
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sqlite3
import tempfile
import time
from pathlib import Path

import distlock

TTL = 2.0  # a dead leader is replaced this long after its last renewal


def record(ledger: Path, term: int, text: str) -> bool:
    """The protected resource: accepts a write only if its term is at least the largest term seen."""
    with sqlite3.connect(ledger, timeout=10) as db:
        db.execute("CREATE TABLE IF NOT EXISTS log (term INTEGER, text TEXT)")
        newest = db.execute("SELECT COALESCE(MAX(term), 0) FROM log").fetchone()[0]
        if term < newest:
            return False
        db.execute("INSERT INTO log VALUES (?, ?)", (term, text))
        return True


def instance(url: str, me: str, ledger: Path, rounds: int) -> None:
    with distlock.connect(url) as store:
        election = store.election("scheduler", ttl=TTL)
        election.campaign(value=me)
        term = election.term
        assert term is not None
        print(f"{me}: leader, term {term}", flush=True)
        for n in range(rounds):
            if election.lost.wait(0.2):  # the lease clock: told before anyone else can lead
                print(f"{me}: lost leadership, stopping", flush=True)
                return
            if not record(ledger, term, f"{me} round {n}"):
                print(f"{me}: the ledger refused term {term}", flush=True)
                return
        election.resign()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--instances", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{tmp}/locks.db"
        ledger = Path(tmp) / "ledger.db"
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=instance, args=(url, f"instance-{i}", ledger, 5)) for i in range(args.instances)]
        with distlock.connect(url) as store:
            changes = store.observe("scheduler", timeout=60)
            next(changes)  # no leader yet
            for p in procs:
                p.start()
                time.sleep(0.2)  # campaign in order: instance-0, instance-1, ...
            first = next(changes)
            assert first is not None
            print(f"observer: {first.value} leads (term {first.term})", flush=True)
            time.sleep(0.3)
            victim = procs[int(str(first.value).rsplit("-", 1)[1])]
            assert victim.pid is not None
            os.kill(victim.pid, signal.SIGKILL)
            print(f"observer: killed {first.value} with SIGKILL", flush=True)
            seen = [first]
            for info in changes:
                if info is not None:
                    print(f"observer: {info.value} leads (term {info.term})", flush=True)
                    seen.append(info)
                if len(seen) == args.instances:
                    break
            for p in procs:
                p.join(60)
        terms = [i.term for i in seen if i.term is not None]  # a None term fails the check below
        with sqlite3.connect(ledger) as db:
            writes = db.execute("SELECT COUNT(*), COUNT(DISTINCT term) FROM log").fetchone()
        increasing = len(terms) == len(seen) and terms == sorted(set(terms))
        print(f"{len(seen)} leaders, terms {terms}: strictly increasing = {increasing}")
        print(f"ledger: {writes[0]} writes from {writes[1]} terms")


if __name__ == "__main__":
    main()
