"""What one check runs: its settings (``CheckConfig``), their validation, and the lease they imply.

Kept apart from the run itself so that the command line can check a configuration (one-line errors, exit 2)
without touching processes, and so that the run loop, the fault injector and the report all read the same
lease (``lease_of``): the time a dead or paused holder keeps the lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ConfigError
from .broken import BROKEN
from .gray import GRAY_FAULTS, link_hosts
from .primitives import PRIMITIVES, round_seconds
from .semaphore import DEFAULT_PERMITS, SEMAPHORE
from .servers import SERVER_FAULTS, Spawned
from .sinks import SINKS, WRITERS
from .worker import DISTLOCK_ALGORITHMS

FAULTS = (
    "kill", "pause", "server-restart", "leader-kill", "failover", "partition", "clock-skew", "fork", "resize",
    *GRAY_FAULTS,
)  # fmt: skip
ALGORITHMS = (*DISTLOCK_ALGORITHMS, *PRIMITIVES, SEMAPHORE, *BROKEN)
#: the kinds whose workers use one of distlock's primitives other than its lock (no fenced resource, no sinks)
PRIMITIVE_KINDS = (*PRIMITIVES, SEMAPHORE)
#: which of distlock's APIs the workers drive
APIS = ("sync", "async")


@dataclass
class CheckConfig:
    url: str | None
    algorithm: str = "distlock"
    workers: int = 8
    seconds: float = 10.0
    ttl: float = 2.0
    hold: float = 0.02
    faults: tuple[str, ...] = ()
    server: Spawned | None = None  # the deployment --spawn started (server faults need one)
    history: Path | None = None  # write every operation and fault as JSON lines here
    api: str = "sync"  # "async": the workers drive distlock's asyncio API
    sinks: tuple[str, ...] = ()  # the data sinks each holding writes to (``--sink``)
    writers: tuple[str, ...] = WRITERS  # how it writes to them (``--writer``)
    sql_sink: str | None = None  # the sql sink's database: a URL, or postgres/mysql (started for the run)
    permits: int | None = None  # ``--algorithm semaphore``: the capacity (None: DEFAULT_PERMITS)
    extra: dict[str, Any] = field(default_factory=dict)


def _known(what: str, given: Sequence[str], choices: Sequence[str], more: str = "") -> None:
    for value in given:
        if value not in choices:
            raise ConfigError(f"unknown {what} {value!r}; choose from {', '.join(choices)}{more}")


def validate(cfg: CheckConfig) -> None:
    if cfg.algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown --algorithm {cfg.algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    _known("fault", cfg.faults, FAULTS)
    for f in cfg.faults:
        if f not in SERVER_FAULTS:
            continue
        if cfg.server is None:
            raise ConfigError(f"the {f} fault needs --spawn (the checker only breaks servers it started)")
        if cfg.server.family not in SERVER_FAULTS[f]:
            raise ConfigError(f"the {f} fault needs --spawn {' or '.join(SERVER_FAULTS[f])}")
    if cfg.algorithm in PRIMITIVE_KINDS:
        _check_primitive(cfg)
    if cfg.permits is not None and cfg.algorithm != SEMAPHORE:
        raise ConfigError(f"--permits is the capacity of --algorithm semaphore; not of {cfg.algorithm}")
    if cfg.permits is not None and cfg.permits < 1:
        raise ConfigError(f"--permits must be 1 or more, not {cfg.permits}")
    if "resize" in cfg.faults and cfg.algorithm != SEMAPHORE:
        raise ConfigError("the resize fault resizes a semaphore: use it with --algorithm semaphore")
    if "fork" in cfg.faults and cfg.algorithm not in DISTLOCK_ALGORITHMS:
        raise ConfigError(f"the fork fault forks holders of distlock's own lock; the {cfg.algorithm} baseline has none")
    if cfg.api not in APIS:
        raise ConfigError(f"unknown --api {cfg.api!r}; choose from {', '.join(APIS)}")
    if cfg.api == "async" and cfg.algorithm not in DISTLOCK_ALGORITHMS:
        raise ConfigError(f"--api async drives distlock's own lock; the {cfg.algorithm} baseline has no asyncio API")
    _known("--sink", cfg.sinks, SINKS, " or all")
    _known("--writer", cfg.writers, WRITERS)
    if cfg.sql_sink is not None and "sql" not in cfg.sinks:
        raise ConfigError("--sql-sink says where the sql sink writes: add --sink sql")
    if cfg.sinks and cfg.algorithm not in DISTLOCK_ALGORITHMS:
        raise ConfigError(f"--sink writes under distlock's own lock (its fence and lease); not {cfg.algorithm}")
    url = cfg.url or ""
    if cfg.algorithm in BROKEN and BROKEN[cfg.algorithm][1] and not url.startswith(("redis://", "rediss://")):
        raise ConfigError(f"--algorithm {cfg.algorithm} needs a redis:// URL (or --spawn)")
    if cfg.algorithm in (*DISTLOCK_ALGORITHMS, *PRIMITIVE_KINDS) and url.startswith("memory:"):
        raise ConfigError("memory:// is in-process only; the check runs several processes (use sqlite:// or a server)")
    gray = [f for f in cfg.faults if f in GRAY_FAULTS]
    if gray and gray_faults_skipped(cfg) is None:
        if cfg.algorithm == "lockfile":
            raise ConfigError(f"{', '.join(gray)}: the lockfile baseline has no network link to break")
        link_hosts(cfg.url)  # a one-line ConfigError: this store has no link to break


def _check_primitive(cfg: CheckConfig) -> None:
    """A barrier, latch or semaphore run: no fenced resource, no lock holding to fork or write with, the
    threaded API only."""
    what = f"--algorithm {cfg.algorithm}"
    if "fork" in cfg.faults:
        raise ConfigError(f"the fork fault forks holders of distlock's lock; {what} has none (drop fork)")
    if cfg.api != "sync":
        raise ConfigError(f"{what} drives the threaded API only (drop --api {cfg.api})")
    if cfg.sinks:
        raise ConfigError(f"--sink writes under distlock's lock and its fence; not under {what} (drop --sink)")


def capacity(cfg: CheckConfig) -> int:
    """The semaphore's capacity in a semaphore run."""
    return DEFAULT_PERMITS if cfg.permits is None else cfg.permits


def gray_faults_skipped(cfg: CheckConfig) -> str | None:
    """Why the gray link faults asked for are skipped on this store (None: they run, or none were asked).

    A store without a network link (sqlite, a lock file) has nothing to freeze. Asked alone, the faults are
    refused (``validate`` raises); listed among others (the same ``--faults`` for every backend), they are
    skipped and the run says so."""
    gray = [f for f in cfg.faults if f in GRAY_FAULTS]
    if not gray or all(f in GRAY_FAULTS for f in cfg.faults):
        return None
    no_link = cfg.algorithm == "lockfile"
    if not no_link:
        try:
            link_hosts(cfg.url)
        except ConfigError:
            no_link = True
    if not no_link:
        return None
    return f"{', '.join(gray)} skipped: this store has no network link to break"


def zookeeper_session(url: str | None) -> float | None:
    """The session timeout a ZooKeeper URL asks for (seconds; None: not ZooKeeper, or not a number)."""
    from .._url import parse_url

    config = parse_url(url)
    if config.backend != "zookeeper":
        return None
    try:
        return float(config.params.get("session_timeout", "10"))
    except ValueError:
        return None


def effective_lease(url: str | None, ttl: float) -> float:
    """How long a dead or paused holder keeps the lock: the TTL, or ZooKeeper's session timeout (which is what
    frees a ZooKeeper lock; the lock's ``ttl`` does not apply there)."""
    session = zookeeper_session(url)
    return ttl if session is None else max(ttl, session)


def member_place(cfg: CheckConfig) -> float:
    """The least a double barrier member's place lasts after its entry started when nobody renews it
    (``primitive_analysis.early_leaves``' ``run_out``): the tripped marker's ``linger``, the round's length; on
    ZooKeeper a member's node lasts its session instead, so the session timeout when it is shorter (the server
    may raise a short one to two ticks, which only lengthens it)."""
    session = zookeeper_session(cfg.url)
    linger = round_seconds(cfg.ttl)
    return linger if session is None else min(linger, session)


def lease_of(cfg: CheckConfig) -> float:
    """The lease of this run: ``effective_lease`` for distlock's own locks and semaphores, the TTL for the
    baselines."""
    return effective_lease(cfg.url, cfg.ttl) if cfg.algorithm in (*DISTLOCK_ALGORITHMS, SEMAPHORE) else cfg.ttl
