#!/usr/bin/env python3
"""Where an uncontended Redis acquire + release goes, layer by layer, next to redis-py's ``Lock``.

    python benchmarks/redis_layers.py [--pairs 6000] [--rounds 3] [--url redis://...]

Starts one loopback redis-server unless ``--url`` is given. The same name in a loop, one process, each layer
called on its own: a bare socket sending distlock's two pre-encoded scripts (and, beside it, redis-py's
``SET NX PX`` and release script), distlock's ``Wire.call``, ``Node.script``, the backend's ``try_once`` +
``release``, ``Lock.acquire()`` + ``release()``, and redis-py's ``Lock``. For each: the median wall time and
client CPU per pair of ``--rounds`` runs, and the server's time per pair (``INFO commandstats``: the scripts,
and redis-py's ``SET``). Last, the lock layer alone: ``Lock`` with the backend's two calls replaced by stubs
that answer at once (a tight loop, caches warm). Figures in docs/bench.md, "Where an uncontended Redis pair
goes".
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import redis  # noqa: E402

import distlock  # noqa: E402
from distlock._backends.redis import calls as rc  # noqa: E402
from distlock._backends.redis import lua as redis_lua  # noqa: E402
from distlock._core.types import Claim, Grant, Mode  # noqa: E402

SERVER_TIME = ("cmdstat_evalsha", "cmdstat_set")


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from tools.servers.redis import redis_server

    with redis_server() as srv:
        yield srv.url


def measure(raw: redis.Redis, pairs: int, rounds: int, pair: Callable[[], object]) -> tuple[float, float, float]:
    """Median wall and client CPU (us per pair) of ``rounds`` runs, and the server's time per pair."""
    for _ in range(300):
        pair()
    walls, cpus = [], []
    raw.config_resetstat()
    for _ in range(rounds):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(pairs):
            pair()
        walls.append((time.perf_counter() - t) / pairs * 1e6)
        cpus.append((time.process_time() - c) / pairs * 1e6)
    stats = raw.info("commandstats")
    spent = sum(stats[k]["usec"] for k in SERVER_TIME if k in stats) / (pairs * rounds)
    return statistics.median(walls), statistics.median(cpus), spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--url", default=None)
    args = ap.parse_args()
    with server(args.url) as url:
        raw = redis.Redis.from_url(url)
        for text in redis_lua.SCRIPTS.values():
            raw.script_load(text)
        store = distlock.connect(url)
        backend: Any = store._backend  # type: ignore[attr-defined]
        node = backend.node
        lock = store.lock("layers-lock", ttl=30)
        with lock:  # the fence counter seeded, the scripts loaded
            pass
        claim = Claim("layers", Mode.EXCLUSIVE, "c" * 32, "host:1:main", 30.0)
        marker = node.fences.marker(claim.name)
        acquire_args = rc.acquire_args(claim.token, claim.mode, claim.ttl, 1, False, claim.record, 5.0, marker)
        acquire, release = (
            rc.packed_call("acquire", claim.name, *acquire_args),
            rc.packed_call("release", claim.name, *rc.release_args(claim)),
        )
        theirs_lock = "layers-redis-py"
        theirs_release_sha = raw.script_load(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
        )
        theirs = (
            rc.packed_command("SET", theirs_lock, claim.token, "NX", "PX", "30000"),
            rc.packed_command("EVALSHA", theirs_release_sha, "1", theirs_lock, claim.token),
        )
        parts = urlsplit(url)
        sock = socket.create_connection((parts.hostname, parts.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(5)
        buf = bytearray(4096)

        def bare(a: bytes, b: bytes) -> Callable[[], None]:
            def pair() -> None:
                sock.sendall(a)
                sock.recv_into(buf)
                sock.sendall(b)
                sock.recv_into(buf)

            return pair

        def node_pair() -> None:
            node.script("acquire", claim.name, *acquire_args, timeout=10.0)
            node.script("release", claim.name, *rc.release_args(claim), timeout=10.0)

        def backend_pair() -> None:
            backend.try_once(claim)
            backend.release(claim)

        redis_py = raw.lock("layers-redis-py-lock", timeout=30)
        rows: list[tuple[str, Callable[[], object]]] = [
            ("bare socket, distlock's two scripts", bare(acquire, release)),
            ("bare socket, redis-py's SET NX PX + its script", bare(*theirs)),
            ("Wire.call x2", lambda: (node.wire.call(acquire, None, 10.0), node.wire.call(release, None, 10.0))),
            ("Node.script x2", node_pair),
            ("backend try_once + release", backend_pair),
            ("Lock.acquire() + release()", lambda: (lock.acquire(), lock.release())),
            ("redis-py Lock", lambda: (redis_py.acquire(), redis_py.release())),
        ]
        print(f"{'layer':48s} {'wall us/pair':>12s} {'pairs/s':>8s} {'client CPU us':>13s} {'server us':>9s}")
        for label, pair in rows:
            wall, cpu, spent = measure(raw, args.pairs, args.rounds, pair)
            print(f"{label:48s} {wall:12.1f} {1e6 / wall:8.0f} {cpu:13.1f} {spent:9.1f}")
        sock.close()
        backend.try_once = lambda claim, reply="": Grant(True, fence=1)
        backend.release = lambda claim: True
        hot = [measure(raw, args.pairs * 3, 1, lambda: (lock.acquire(), lock.release()))[0] for _ in range(5)]
        print(f"{'the lock layer alone (stub backend, warm)':48s} {statistics.median(hot):12.1f}")
        store.close()
        raw.close()


if __name__ == "__main__":
    main()
