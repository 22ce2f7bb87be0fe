"""Re-exports :mod:`distlock._servers.postgres` (one implementation for the tests and ``--spawn``)."""

from distlock._servers.postgres import (
    DATABASE,
    PASSWORD,
    USER,
    admin,
    pg_bindir,
    postgres_server,
    start_postgres,
    stop_postgres,
)

__all__ = [
    "DATABASE",
    "PASSWORD",
    "USER",
    "admin",
    "pg_bindir",
    "postgres_server",
    "start_postgres",
    "stop_postgres",
]
