#!/usr/bin/env python3
"""distlock's MySQL/MariaDB lease-mode hand-off against the raw ``GET_LOCK`` hand-off, in alternated runs of
one or more source trees.

    .venv/bin/python benchmarks/sql_lease_handoff.py [--tree DIR ...] [--rounds 6] [--seconds 3] [--async]
                                                     [--mysql URL]

Each round measures the raw hand-off (``sql_peers.py``'s raw ``GET_LOCK`` row) and, one after the other, the
lease-mode hand-off of every ``--tree`` (a checkout's root with ``src/`` and ``benchmarks/``, e.g. ``git
archive <commit> src benchmarks | tar -x -C /tmp/before``), every other round in reverse order, each in a
child process that imports that tree: two processes taking strict turns with 3 ms holds (``distlock bench``'s
hand-off; ``--async``: both on the asyncio API). A line per round: each p50 and p99, each p50 as a multiple
of the raw one, and the last tree's p50 against the first's. Without ``--mysql`` it starts a MariaDB
(tools/servers/).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(url: str, kind: str, seconds: float) -> dict[str, float]:
    """In the tree this process imports: one hand-off measurement; its latency figures (ms)."""
    from benchmarks import _measure, sql_peers
    from distlock.benchmark import measure

    if kind == "async":
        r = measure.handoff(url, seconds, _measure.TTL, use_async=True)
    else:
        r = _measure.handoff(sql_peers.RawGetLock if kind == "raw" else sql_peers.MysqlLease, url, seconds)
    latency: dict[str, float] = r["latency_ms"]
    return latency


def _child(tree: Path, url: str, kind: str, seconds: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sql_lease_handoff.py"), "--run", url, kind, str(seconds)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", help="a source tree to measure (repeatable; default: this one)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--async", dest="use_async", action="store_true", help="both processes on the asyncio API")
    ap.add_argument("--mysql", help="a MySQL/MariaDB URL to use instead of starting a server")
    ap.add_argument("--run", nargs=3, metavar=("URL", "KIND", "SECONDS"), help=argparse.SUPPRESS)  # in a child
    args = ap.parse_args()
    if args.run:
        sys.path[:0] = [str(Path.cwd()), str(Path.cwd() / "src")]
        print(json.dumps(one_run(args.run[0], args.run[1], float(args.run[2]))))
        return
    trees = [Path(t).resolve() for t in args.tree or [str(ROOT)]]
    kind = "async" if args.use_async else "lease"
    sys.path.insert(0, str(ROOT))
    from tools.servers.mysql import mariadb_server

    with mariadb_server() if args.mysql is None else _given(args.mysql) as srv:
        url = str(srv.url)
        for tree in trees:  # warm: tables made, server caches filled
            _child(tree, url, kind, 1.0)
        _child(trees[0], url, "raw", 1.0)
        for i in range(args.rounds):
            order: list[Path | None] = [None, *trees]  # None: the raw hand-off
            if i % 2:
                order.reverse()
            res = {t: _child(t or trees[0], url, "raw" if t is None else kind, args.seconds) for t in order}
            raw = res[None]["p50"]
            cells = [f"raw p50 {raw:.3f} ms"] + [
                f"{t.name}: p50 {res[t]['p50']:.3f} ms = {res[t]['p50'] / raw:.2f}x (p99 {res[t]['p99']:.2f})"
                for t in trees
            ]
            if len(trees) > 1:
                cells.append(f"last/first {res[trees[-1]]['p50'] / res[trees[0]]['p50']:.2f}")
            print(f"round {i}: " + " | ".join(cells), flush=True)


class _given:
    """A server given by URL, in the shape of ``mariadb_server()``'s."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> _given:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
