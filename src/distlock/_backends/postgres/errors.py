"""The error of a PostgreSQL call the SQL watchdog ended at its deadline, for both driver seams (the watchdog
itself serves MySQL too and imports no driver)."""

from __future__ import annotations

import psycopg


def timed_out() -> psycopg.OperationalError:
    """The error of a call ended at its deadline: a driver error of a lost connection, which every caller already
    handles (the connection is closed, never reused)."""
    return psycopg.OperationalError("the database call timed out: its socket was shut down at the deadline")
