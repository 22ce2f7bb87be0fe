"""Re-exports :mod:`distlock._servers.proc` (one implementation for the tests and ``--spawn``)."""

from distlock._servers.proc import (
    LOOPBACK,
    ServerProc,
    free_port,
    free_ports,
    port_open,
    which,
    workdir,
)

__all__ = [
    "LOOPBACK",
    "ServerProc",
    "free_port",
    "free_ports",
    "port_open",
    "which",
    "workdir",
]
