"""Re-exports :mod:`distlock._servers.zookeeper` (one implementation for the tests and ``--spawn``)."""

from distlock._servers.zookeeper import (
    JARS,
    LOG_JARS,
    TICK_MS,
    ZkEnsemble,
    ZkNode,
    available,
    four_letter,
    make_ensemble,
    server_mode,
    zookeeper_ensemble,
    zookeeper_jar,
)

__all__ = [
    "JARS",
    "LOG_JARS",
    "TICK_MS",
    "ZkEnsemble",
    "ZkNode",
    "available",
    "four_letter",
    "make_ensemble",
    "server_mode",
    "zookeeper_ensemble",
    "zookeeper_jar",
]
