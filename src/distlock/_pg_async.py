"""The PostgreSQL driver on the async side (psycopg 3 ``AsyncConnection``); ``_pg_sync.py`` is its twin.

The backend (``_async/backends/postgres.py``) imports this module as ``pg``; ``scripts/gen_sync.py``
swaps it for ``_pg_sync`` in the generated sync backend, so both sides share one source.
"""

from __future__ import annotations

from typing import Any

import psycopg

Connection = psycopg.AsyncConnection[Any]
Cursor = psycopg.AsyncCursor[Any]


async def connect(**kwargs: Any) -> Connection:
    return await psycopg.AsyncConnection.connect(**kwargs)
