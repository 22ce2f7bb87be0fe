#!/usr/bin/env python3
"""Every peer library next to distlock, backend by backend, on the same loopback servers, in one run.

    .venv/bin/python benchmarks/peers.py [--only sqlite,redis,redlock,zookeeper,etcd,mysql,postgres]
                                         [--seconds 3] [--workers 8] [--json FILE] [--plot FILE.png]

For each backend it starts a throwaway deployment (tools/servers/: one redis-server and five Redlock masters with
persistence off, a 3-node ZooKeeper ensemble whose first server every client uses, a 3-member etcd cluster with
fsync on, MariaDB, PostgreSQL, a SQLite file), and measures every library that imports (the peers are not test
dependencies; a missing one is skipped with a note):

| backend | rows |
|---|---|
| sqlite | distlock |
| redis | distlock, redis-py ``Lock``, python-redis-lock |
| redlock | distlock (5 masters), pottery ``Redlock`` |
| zookeeper | distlock, kazoo ``Lock``, tooz; floor: bare kazoo create + list + delete |
| etcd | distlock, python-etcd3 ``Lock``, tooz; floors: one put per round trip (httpx, distlock's client) |
| mysql | distlock lease / session / session row lock, raw ``GET_LOCK``, tooz |
| postgres | distlock lease / session, raw ``pg_advisory_lock``, tooz |

The measurements are ``distlock bench``'s own (src/distlock/benchmark/measure.py), through each library's lock:

* uncontended: acquire + release in a loop, one process; the rows of one backend in interleaved quarter-second
  slices, so a busy machine slows them alike (locks/s);
* hand-off: two processes take strict turns, each holding 3 ms; the waiter's acquire() returning minus the
  holder's release() starting (p50 / p99 ms);
* contention: ``--workers`` processes loop acquire + release on one lock (total locks/s, per-worker min-max).

The hand-off and contention runs of one backend go in alternated rounds (``--pairs``, 2 by default): each round
measures every row once, the next one in the reverse order, and a row's figure is its best round (the JSON keeps
each round, and a note under the table gives distlock's rate against the best peer's round by round). A server that
speeds up as it warms (a JVM's compiler), a pause of a server or a load that comes and goes then favours no row for
being measured later, and a stall in one round does not make the row.

Each figure is also given as a ratio to the best peer of its backend in the same run (rates: row / best; hand-off:
row's p50 / best p50) and to the raw round-trip limit measured in the same run (src/distlock/benchmark/probes.py:
rates as a share of round trips/s / 2, the hand-off p50 as a multiple of one round trip). The load average is
recorded at the start and the end, and per backend.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks import _measure, etcd_peers, redis_peers, sql_peers, zookeeper_peers  # noqa: E402
from benchmarks._measure import Distlock, Lib  # noqa: E402
from distlock.benchmark.measure import raw_entry, vs_raw  # noqa: E402
from distlock.benchmark.probes import probe  # noqa: E402


# -- the deployments: each starter enters its servers into the stack and returns the URL every row uses ----------
def _sqlite(stack: ExitStack, args: argparse.Namespace) -> str:
    return f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory(prefix='distlock-peers-'))}/locks.db"


def _redis(stack: ExitStack, args: argparse.Namespace) -> str:
    from tools.servers.redis import redis_server

    return str(stack.enter_context(redis_server()).url)


def _redlock(stack: ExitStack, args: argparse.Namespace) -> str:
    from tools.servers.redis import redis_masters, redlock_url

    return redlock_url(stack.enter_context(redis_masters(5)))


def _redis_cluster(stack: ExitStack, args: argparse.Namespace) -> str:
    from tools.servers.redis_cluster import redis_cluster

    return str(stack.enter_context(redis_cluster(3)).url)


def _zookeeper(stack: ExitStack, args: argparse.Namespace) -> str:
    from tools.servers.zookeeper import zookeeper_ensemble

    hosts = stack.enter_context(zookeeper_ensemble(3)).hosts
    # every client on the first server unless asked otherwise: leader vs follower moves the figures more than the
    # libraries do
    return "zookeeper://" + (hosts if getattr(args, "any_server", False) else hosts.split(",")[0])


def _etcd(stack: ExitStack, args: argparse.Namespace) -> str:
    from tools.servers.etcd import etcd_cluster

    return str(stack.enter_context(etcd_cluster(3, fsync=True)).url)


def _mysql(stack: ExitStack, args: argparse.Namespace) -> str:
    from tools.servers.mysql import mariadb_server

    return str(stack.enter_context(mariadb_server()).url)


def _postgres(stack: ExitStack, args: argparse.Namespace) -> str:
    from tools.servers.postgres import postgres_server

    return str(stack.enter_context(postgres_server()).url)


@dataclass(frozen=True)
class Family:
    name: str
    start: Callable[[ExitStack, argparse.Namespace], str]
    libs: Sequence[type[Lib]]
    #: servers that compile their code as it runs (a JVM): the first rows measured on a fresh one pay for it, so
    #: the lock rows run once, unmeasured, before the rounds (``--warmup``)
    warms_up: bool = False


FAMILIES = {
    f.name: f
    for f in (
        Family("sqlite", _sqlite, [Distlock]),
        Family("redis", _redis, [Distlock, redis_peers.RedisPy, redis_peers.PythonRedisLock]),
        Family("redlock", _redlock, [Distlock, redis_peers.Pottery]),
        Family("redis-cluster", _redis_cluster, [Distlock]),
        Family("zookeeper", _zookeeper, zookeeper_peers.LIBS, warms_up=True),
        Family("etcd", _etcd, etcd_peers.LIBS),
        Family("mysql", _mysql, sql_peers.MYSQL_LIBS),
        Family("postgres", _postgres, sql_peers.POSTGRES_LIBS),
    )
}
#: what a bare run measures (the cluster row is redis_peers.py's: the same code as one node, three servers more)
DEFAULT = ["sqlite", "redis", "redlock", "zookeeper", "etcd", "mysql", "postgres"]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _try(row: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    try:
        row[key] = fn()
    except Exception as err:  # noqa: BLE001 - one failing measurement must not hide the others
        row["errors"].append(f"{key}: {type(err).__name__}: {err}")
        print(f"  {row['label']}: {key} failed: {err}", file=sys.stderr)


def _open(family: Family, url: str, keys: set[str] | None, skipped: list[str]) -> list[Lib]:
    libs = []
    for cls in family.libs:
        if keys and cls.key not in keys:
            continue
        try:
            libs.append(cls(url))
        except Exception as err:  # noqa: BLE001 - a peer that does not import (or load) is skipped, and said so
            skipped.append(f"{family.name}: {cls.name} skipped ({type(err).__name__}: {str(err).splitlines()[0]})")
            print(skipped[-1], file=sys.stderr)
    return libs


def measure_family(
    family: Family,
    url: str,
    seconds: float,
    workers: int,
    keys: set[str] | None,
    skipped: list[str],
    pairs: int = 2,
    warmup: float = 2.0,
) -> dict[str, Any]:
    load = _load()
    libs = _open(family, url, keys, skipped)
    rows: list[dict[str, Any]] = [
        {
            "backend": family.name,
            "label": lib.name,
            "ours": lib.ours,
            "floor": lib.floor,
            "uncontended": None,
            "handoff": None,
            "contention": None,
            "errors": [],
        }
        for lib in libs
    ]
    print(f"{family.name}: {', '.join(lib.name for lib in libs)}", file=sys.stderr)
    try:
        for row, summary in zip(rows, _measure.uncontended(libs, seconds), strict=True):
            row["uncontended"] = summary
    except Exception as err:  # noqa: BLE001
        for row in rows:
            row["errors"].append(f"uncontended: {type(err).__name__}: {err}")
    finally:
        for lib in libs:
            lib.close()  # the workers below open their own connections
    raw = None
    try:  # after the uncontended loops warmed the servers (a JVM that has just started answers slowly at first)
        raw = raw_entry(probe(url, min(seconds, 2.0)))
    except Exception as err:  # noqa: BLE001
        skipped.append(f"{family.name}: raw probe failed ({type(err).__name__}: {err})")
    # bare round trips (floors) exclude nobody: there is no hand-off or contention to measure
    locks = [(lib, row) for lib, row in zip(libs, rows, strict=True) if not lib.floor]
    if family.warms_up and warmup > 0:
        # A fresh ZooKeeper ensemble's JVMs compile the paths of a contended lock (many sessions, watch events) as
        # they serve them: on a cold one, 8 processes of the row measured first made the servers spend 2-3x the CPU
        # per acquisition of a warm one, and the next row found them warm (docs/bench.md, "ZooKeeper on a 3-node
        # ensemble under contention").
        for lib, row in locks:
            _try(row, "warmup", lambda lib=lib: _measure.contention(type(lib), url, warmup, workers))
            row.pop("warmup", None)
    for i in range(max(1, pairs)):
        for lib, row in locks if i % 2 == 0 else locks[::-1]:  # alternated: every other round in reverse
            for key, fn in (
                ("handoff", lambda lib=lib: _measure.handoff(type(lib), url, seconds)),
                ("contention", lambda lib=lib: _measure.contention(type(lib), url, seconds, workers)),
            ):
                row[key] = None
                _try(row, key, fn)
                if row[key] is not None:
                    row.setdefault("rounds", {}).setdefault(key, []).append(row[key])
    for _, row in locks:
        for key, merge in (("handoff", _best_handoff), ("contention", _best_contention)):
            done = row.get("rounds", {}).get(key)
            row[key] = merge(done) if done else None
    _ratios(rows, raw)
    return {"family": family.name, "load_avg": load, "raw": raw, "rows": rows, "server": _server_role(family, url)}


def _server_role(family: Family, url: str) -> str | None:
    """The role of the one ZooKeeper server every client uses (``srvr``): a write through a follower takes one hop
    more than one through the leader, and which one is first is left to the ensemble's election."""
    if family.name != "zookeeper":
        return None
    hosts = url.split("://", 1)[1].split("/", 1)[0].split(",")
    if len(hosts) != 1:
        return None
    from tools.servers.zookeeper import server_mode

    host, _, port = hosts[0].rpartition(":")
    return server_mode(int(port), host)


def _best_handoff(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the lowest p50: a stall of the shared machine (a server's pause, a burst of load elsewhere)
    only ever slows a round, so the best one is the library's own figure; every round stays in the JSON."""
    return {**min(rounds, key=lambda r: r["latency_ms"]["p50"]), "rounds": len(rounds)}


def _best_contention(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the highest rate (``_best_handoff`` says why)."""
    return {**max(rounds, key=lambda r: r["rate_per_s"]), "rounds": len(rounds)}


def _figure(row: dict[str, Any], key: str) -> float | None:
    m = row.get(key)
    if not m:
        return None
    return m["latency_ms"]["p50"] if key == "handoff" else m["rate_per_s"]


def _ratios(rows: list[dict[str, Any]], raw: dict[str, Any] | None) -> None:
    """Each row's figures against the best peer of its backend and against the raw limit, all of one run."""
    peers = [r for r in rows if not r["ours"] and not r["floor"]]
    for key, name, pick in (
        ("uncontended", "uncontended", max),
        ("handoff", "handoff_p50", min),
        ("contention", "contention", max),
    ):
        values = [v for v in (_figure(r, key) for r in peers) if v]
        best = pick(values) if values else None
        for r in rows:
            v = _figure(r, key)
            r.setdefault("vs_best_peer", {})[name] = round(v / best, 3) if v is not None and best else None
    for r in rows:
        r["raw"] = raw
        r["vs_raw"] = vs_raw(r, raw)


@contextlib.contextmanager
def busy_cpus(n: int) -> Iterator[None]:
    """``n`` processes that spin at the lowest priority (nice 19) for the length of the block. They take a CPU
    only when nothing else wants it, so no CPU goes idle: on a virtual machine, waking an idle vCPU costs tens
    of microseconds, which a hand-off pays whenever its waiter's vCPU had gone idle. With them, a hand-off
    figure measures the processes and the servers, not the hypervisor (``--busy-cpus``, docs/bench.md)."""
    spin = "import os\nos.nice(19)\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def run(args: argparse.Namespace, names: list[str], urls: dict[str, str], keys: set[str] | None) -> dict[str, Any]:
    with busy_cpus(args.busy_cpus):
        return _run(args, names, urls, keys)


def _run(args: argparse.Namespace, names: list[str], urls: dict[str, str], keys: set[str] | None) -> dict[str, Any]:
    skipped: list[str] = []
    doc: dict[str, Any] = {
        "version": 1,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": args.seconds,
        "workers": args.workers,
        "pairs": getattr(args, "pairs", 2),
        "busy_cpus": args.busy_cpus,
        "host": {
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "load_avg": {"start": _load(), "end": None},
        },
        "families": [],
        "skipped": skipped,
    }
    for name in names:
        family = FAMILIES[name]
        with ExitStack() as stack:
            try:
                url = urls.get(name) or family.start(stack, args)
            except Exception as err:  # noqa: BLE001 - a server that is not installed skips its backend, said so
                skipped.append(f"{name}: servers did not start ({type(err).__name__}: {err})")
                print(skipped[-1], file=sys.stderr)
                continue
            doc["families"].append(
                measure_family(
                    family,
                    url,
                    args.seconds,
                    args.workers,
                    keys,
                    skipped,
                    getattr(args, "pairs", 2),
                    getattr(args, "warmup", 2.0),
                )
            )
    doc["host"]["load_avg"]["end"] = _load()
    return doc


# -- output --------------------------------------------------------------------------------------------------------
def _x(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.0%}" if pct else f"{v:.2f}x"


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def markdown(doc: dict[str, Any]) -> str:
    h = doc["host"]
    lines = [
        f"{doc['date']}, {h['cpus']} CPUs ({h['machine']}), Python {h['python']}, {doc['seconds']:g} s per measurement"
        f" (hand-off and processes: the best of {doc.get('pairs', 1)} alternated rounds),"
        f" load average (1/5/15 min) {'/'.join(map(str, h['load_avg']['start']))} at the start,"
        f" {'/'.join(map(str, h['load_avg']['end']))} at the end"
        + (f", {doc['busy_cpus']} nice-19 busy loops (`--busy-cpus`)." if doc.get("busy_cpus") else "."),
        "",
        "| backend | library | uncontended/s | vs best peer | vs raw | hand-off p50 ms (p99) | vs best peer | vs raw"
        f" (round trips) | {doc['workers']} processes/s | per worker min-max | vs best peer | vs raw |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fam in doc["families"]:
        for r in fam["rows"]:
            u, h_, c = r["uncontended"], r["handoff"], r["contention"]
            best, raw = r["vs_best_peer"], r["vs_raw"]
            label = f"**{r['label']}**" if r["ours"] else r["label"] + (" (floor)" if r["floor"] else "")
            hand = f"{_num(h_['latency_ms']['p50'])} ({_num(h_['latency_ms']['p99'])})" if h_ else "-"
            spread = f"{c['min']}-{c['max']}" if c else "-"
            lines.append(
                f"| {fam['family']} | {label} | {_num(u and u['rate_per_s'])} | {_x(best['uncontended'])}"
                f" | {_x(raw['uncontended'], pct=True)} | {hand} | {_x(best['handoff_p50'])} | {_x(raw['handoff_p50'])}"
                f" | {_num(c and c['rate_per_s'])} | {spread}"
                f" | {_x(best['contention'])} | {_x(raw['contention'], pct=True)} |"
            )
    lines.append("")
    for fam in doc["families"]:
        raw = fam["raw"]
        limit = (
            f"{raw['probe']}: {_num(raw['round_trips_per_s'])} round trips/s ({raw['round_trip_ms']:.3g} ms each),"
            f" limit {_num(raw['limit_per_s'])} pairs/s"
            if raw
            else "no raw probe"
        )
        role = f", every client on a {fam['server']}" if fam.get("server") else ""
        lines.append(f"* {fam['family']} (load average {fam['load_avg'][0]} at its start{role}): {limit}")
    lines += _round_notes(doc)
    lines += [f"* {note}" for note in doc["skipped"]]
    lines += [
        f"* {r['backend']} {r['label']}: {e}" for fam in doc["families"] for r in fam["rows"] for e in r["errors"]
    ]
    return "\n".join(lines)


def _round_notes(doc: dict[str, Any]) -> list[str]:
    """Each distlock row's figures against the best peer's, round by round (the spread the best-of figures hide)."""
    notes = []
    for fam in doc["families"]:
        peers = [r for r in fam["rows"] if not r["ours"] and not r["floor"] and r.get("rounds")]
        for r in (r for r in fam["rows"] if r["ours"] and r.get("rounds")):
            parts = []
            for key, name, better in (("contention", "processes", max), ("handoff", "hand-off p50", min)):
                ours = r["rounds"].get(key, [])
                theirs = [[_figure({key: m}, key) for m in p["rounds"].get(key, [])] for p in peers]
                ratios = []
                for i, m in enumerate(ours):
                    best = better((t[i] for t in theirs if i < len(t) and t[i]), default=None)
                    v = _figure({key: m}, key)
                    ratios.append(_x(v / best) if v and best else "-")
                if ratios:
                    parts.append(f"{name} {', '.join(ratios)}")
            if parts:
                notes.append(
                    f"* {fam['family']} {r['label']} against the best peer, round by round: {'; '.join(parts)}"
                )
    return notes


def write_json(doc: dict[str, Any], path: str) -> None:
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")


def add_common_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each measurement (default 3)")
    ap.add_argument("--workers", type=int, default=8, help="processes in the contention run (default 8)")
    ap.add_argument(
        "--pairs",
        type=int,
        default=2,
        help="alternated rounds of the hand-off and contention runs, every other one in reverse order (default 2)",
    )
    ap.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="an unmeasured contention run of each row first, where the servers are JVMs (ZooKeeper; default 2)",
    )
    ap.add_argument(
        "--busy-cpus",
        type=int,
        default=0,
        metavar="N",
        help="run N lowest-priority busy loops meanwhile, so no (v)CPU goes idle (default 0; see docs/bench.md)",
    )
    ap.add_argument("--json", help="also write the results as JSON to this file")
    ap.add_argument("--plot", help="also draw the chart to this PNG file (needs matplotlib)")
    # the per-backend scripts' options of before the shared measurement: still accepted, no longer used
    for old in ("--rounds", "--repeat"):
        ap.add_argument(old, type=int, help="ignored (the hand-off runs for --seconds)")


def run_and_report(
    args: argparse.Namespace, names: list[str], urls: dict[str, str], keys: str | None
) -> dict[str, Any]:
    if args.plot:
        import matplotlib  # noqa: F401 - fail before the servers start, not after the run
    doc = run(args, names, urls, set(keys.split(",")) if keys else None)
    print(markdown(doc))
    if args.json:
        write_json(doc, args.json)
    if args.plot:
        from distlock.benchmark.plot import plot

        rows = [r for fam in doc["families"] for r in fam["rows"]]
        plot(
            rows,
            Path(args.plot),
            title=f"distlock and its peers, {doc['date']}, load average "
            f"{doc['host']['load_avg']['start'][0]}-{doc['host']['load_avg']['end'][0]}",
        )
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawTextHelpFormatter,
        epilog="backends: " + ", ".join(FAMILIES),
    )
    ap.add_argument("--only", help=f"comma-separated backends (default: {','.join(DEFAULT)})")
    ap.add_argument("--libs", help="comma-separated rows by key (default: every one that imports)")
    add_common_options(ap)
    args = ap.parse_args()
    names = args.only.split(",") if args.only else DEFAULT
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        ap.error(f"unknown backend {', '.join(unknown)} (choose from {', '.join(FAMILIES)})")
    run_and_report(args, names, {}, args.libs)


if __name__ == "__main__":
    main()
