"""The PostgreSQL driver on the sync side (psycopg 3 ``Connection``); twin of ``_pg_async.py``."""

from __future__ import annotations

from typing import Any

import psycopg

Connection = psycopg.Connection[Any]
Cursor = psycopg.Cursor[Any]


def connect(**kwargs: Any) -> Connection:
    return psycopg.Connection.connect(**kwargs)
