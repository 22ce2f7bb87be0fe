"""Servers ``distlock check --spawn`` / ``distlock bench --spawn`` start themselves, and the server faults.

The deployments themselves are started by the repository's ``tools/servers/`` (the same code the test suite
uses; ``spawn.py`` there): loopback only, free ports, temporary directories removed afterwards. The installed
package ships no server spawners: ``--spawn`` works from a checkout of the repository; against servers of your
own, ``--url`` works anywhere. This module is the interface the checker drives.

=============  ====================================================  =========================================
family         what is started                                       server faults (``check --faults``)
=============  ====================================================  =========================================
``redis``      one redis-server, AOF fsynced on every write          server-restart
``redlock``    5 independent redis-server masters, the same          server-restart (all five crash)
``zookeeper``  a 3-node ensemble                                     server-restart, leader-kill, partition
``etcd``       a 3-member cluster (fsync on, as in production)       server-restart, leader-kill, partition
``postgres``   one PostgreSQL (lease mode), commits flushed          server-restart, clock-skew
``mysql``      one MariaDB (lease mode)                              server-restart, clock-skew
``redis-       a master, a replica and three sentinels, AOF fsynced  failover
sentinel``     (the store asks ``wait_replicas=1``)
``redis-       three masters with a replica each (Redis Cluster;     failover
cluster``      the store asks ``wait_replicas=1``)
=============  ====================================================  =========================================

``failover`` kills (-9) the master that serves the run's lock name; Sentinel or the cluster promotes its replica,
and the killed server starts again a lease later and rejoins as a replica. The store asks ``wait_replicas=1``:
without it a lock granted just before the kill may be missing on the promoted replica, a second holder the check
reports (F5 in docs/safety.md); with it, what is judged is the rest: fences that never go down across the
promotion (the new master's counter may be behind: fences follow the server clock), holders told before the name
is free again, nothing stale written.

The Redis servers keep an append-only file fsynced on every write (``appendfsync always``), so a kill -9 and
restart keeps the lock keys and the fence counter: F4 in docs/safety.md says a lock server that forgets keys on restart
loses its locks (and, on PostgreSQL, its fences), and the ``server-restart`` fault is meant to test the lock, not
that misconfiguration.
``durable=False`` (``--volatile``) starts them with no persistence at all, to show exactly that failure; for
PostgreSQL it means ``synchronous_commit=off`` (a commit returns before its WAL is written, so a kill -9 loses
the last fences handed out). The other families always keep what they committed.

``partition`` needs root and iproute2: one member (the one listed first in the URL) runs in a network
namespace of its own behind a veth link that exists only on this host; the fault takes the link down (cutting
that member off from its peers and every client) and brings it back up. ``clock-skew`` runs the SQL server under
libfaketime with a control file, so its wall clock can jump while it runs (F2 in docs/safety.md); Debian's
redis-server cannot be run under libfaketime (its jemalloc recurses into libfaketime's start-up), see
docs/checker.md.
"""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from .._errors import ConfigError

#: the families whose every server the ``server-restart`` fault crashes and starts again
RESTARTABLE = ("redis", "redlock", "zookeeper", "etcd", "postgres", "mysql")
FAMILIES = (*RESTARTABLE, "redis-sentinel", "redis-cluster")
#: faults the checker injects into servers it started, and the families that support each
SERVER_FAULTS: dict[str, tuple[str, ...]] = {
    "server-restart": RESTARTABLE,
    "failover": ("redis-sentinel", "redis-cluster"),
    "leader-kill": ("zookeeper", "etcd"),
    "partition": ("zookeeper", "etcd"),
    "clock-skew": ("postgres", "mysql"),
}


class Spawned:
    """A running deployment of one family; a context manager that stops it and removes its files.

    Subclasses implement the faults their family supports; ``SERVER_FAULTS`` says which."""

    family = ""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.url = ""
        self.clock_offset = 0.0
        #: the name the run locks (set by the checker): ``failover`` kills the master that serves it
        self.focus = ""

    def start(self) -> Spawned:
        raise NotImplementedError

    def restart(self) -> None:
        """kill -9 of every server of the deployment, then all start again on their data."""
        raise NotImplementedError

    def kill_leader(self) -> Callable[[], None]:
        """kill -9 of the current leader; returns what restarts it."""
        raise ConfigError(f"leader-kill needs a cluster with a leader, not {self.family}")

    def failover(self) -> Callable[[], None]:
        """kill -9 of the master that serves ``focus`` (its replica is promoted); returns what starts the
        killed server again (it rejoins as a replica)."""
        raise ConfigError(f"failover needs --spawn redis-sentinel or redis-cluster, not {self.family}")

    def partition(self) -> Callable[[], None]:
        """Cut the member clients use first off from its peers and every client; returns what heals it."""
        raise ConfigError(f"partition is not available for {self.family}")

    def skew_clock(self, seconds: float) -> None:
        """Move the server's wall clock by ``seconds`` more, while it runs."""
        raise ConfigError(f"clock-skew is not available for {self.family}")

    def close(self) -> None:
        self.stack.close()


def _dev_spawn() -> Callable[..., Spawned]:
    """``tools/servers/spawn.py`` of the repository this package runs from (an editable install or
    ``PYTHONPATH=src``); the installed package ships no server spawners."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "tools" / "servers" / "spawn.py").is_file():
        raise ConfigError(
            "--spawn starts throwaway servers with the tools of distlock's repository: run distlock from a "
            "checkout of it (pip install -e .), or point --url at servers you run"
        )
    if str(root) not in sys.path:
        sys.path.append(str(root))
    module = importlib.import_module("tools.servers.spawn")
    found: Callable[..., Spawned] = module.spawn
    return found


@contextlib.contextmanager
def spawned(family: str, faults: tuple[str, ...] = (), durable: bool = True, lease: float = 2.0) -> Iterator[Spawned]:
    """Start ``family`` for the length of the block; a server that fails to start is a ConfigError (exit 2)."""
    deployment = _dev_spawn()(family, faults, durable, lease)
    try:
        deployment.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        deployment.close()
        raise ConfigError(f"--spawn {family}: could not start the servers: {str(exc)[:500]}") from exc
    except BaseException:
        deployment.close()
        raise
    try:
        yield deployment
    finally:
        deployment.close()


__all__ = ["FAMILIES", "SERVER_FAULTS", "Spawned", "spawned"]
