"""The SQL lease tables made before weighted semaphores: a store that opens them adds the semaphore columns
(``dialects.WEIGHT_COLUMNS``: a holding's permits, a waiter's want, a semaphore's declared and in-force
capacity), and weighted semaphores work on them at once."""

from __future__ import annotations

import uuid

import pytest

import distlock
from distlock._backends.sql.dialects import WEIGHT_COLUMNS
from tests.test_revoke_servers import raw_conn, rows, run


@pytest.mark.parametrize("db", ["mysql", "postgres"])
def test_sql_lease_tables_made_before_weighted_semaphores_get_their_columns(
    db: str, request: pytest.FixtureRequest, name: str
) -> None:
    url = str(request.getfixturevalue(f"{db}_url"))
    prefix = f"ws{uuid.uuid4().hex[:8]}"
    url = f"{url}{'&' if '?' in url else '?'}table_prefix={prefix}"
    with distlock.connect(url):
        pass  # tables made
    conn = raw_conn(db, url)
    try:
        for table, columns in WEIGHT_COLUMNS.items():
            for column in columns:
                run(conn, f"ALTER TABLE {prefix}_{table} DROP COLUMN {column}")
        with distlock.connect(url) as store:
            sem = store.semaphore(name, permits=3, ttl=5)
            assert sem.acquire(timeout=5, permits=2)
            info = store.inspect(name)
            assert info is not None and (info.permits, info.taken) == (3, 2)
            assert not store.semaphore(name, permits=3).acquire(timeout=0.2, permits=2)
            sem.release()
        for table, columns in WEIGHT_COLUMNS.items():
            assert set(columns) <= set(rows(conn, f"SELECT * FROM {prefix}_{table} WHERE 1 = 0", described=True))
    finally:
        conn.close()
