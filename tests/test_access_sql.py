"""MariaDB and PostgreSQL users without CREATE: ``distlock init`` as an admin, then DML-only application users.

The grants are the ones docs/access-control.md prints (:func:`pg_grants`, :func:`my_grants`). Each test
uses a table prefix of its own, so "before init" really has no tables. The servers are this module's own
(creating users needs the superuser on the private socket).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import distlock
from tools.servers import mysql as my_srv
from tools.servers import postgres as pg_srv
from tools.servers.proc import LOOPBACK, ServerProc

ROOT = Path(__file__).resolve().parent.parent
APP_PW = "app-Secret-42"


def one_line_without_secrets(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    for secret in (APP_PW, pg_srv.PASSWORD, my_srv.PASSWORD):
        assert secret not in text and secret not in repr(err), text
    return text


def distlock_init(url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "distlock", "--url", url, "init"], capture_output=True, text=True, timeout=60, env=env
    )


def exercise(url: str, tag: str) -> None:
    """Every lock kind the mode has, inspect, list and break_lock with the application's user."""
    from distlock._core.types import Mode

    with distlock.connect(url) as store, distlock.connect(url) as other:
        modes = store.capabilities.modes
        held = []
        lock = store.lock(f"{tag}/lock", ttl=5)
        assert lock.acquire(timeout=5)
        if Mode.READ in modes:
            rw = store.rwlock(f"{tag}/rw", ttl=5)
            assert rw.read.acquire(timeout=5)
            held.append(rw.read)
        if Mode.SEMAPHORE in modes:
            sem = store.semaphore(f"{tag}/sem", permits=2, ttl=5)
            assert sem.acquire(timeout=5)
            held.append(sem)
        info = store.inspect(f"{tag}/lock")
        assert info is not None and info.holders[0].fence == lock.fence
        assert len(store.list(f"{tag}/")) == 1 + len(held)
        assert not other.lock(f"{tag}/lock").acquire(blocking=False)
        first = lock.fence
        lock.release()
        again = other.lock(f"{tag}/lock", ttl=5)
        assert again.acquire(timeout=5) and again.fence is not None and first is not None and again.fence > first
        assert store.break_lock(f"{tag}/lock")
        assert again.lost.wait(10)
        for h in held:
            h.release()


# -- PostgreSQL -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pg() -> Iterator[ServerProc]:
    if pg_srv.pg_bindir() is None:
        pytest.skip("PostgreSQL is not installed")
    with pg_srv.postgres_server() as srv:
        yield srv


def pg_grants(prefix: str, user: str) -> list[str]:
    """What the application's role needs once ``distlock init`` created the objects (default schema)."""
    tables = ", ".join(f"{prefix}_{t}" for t in ("fences", "holders", "queue", "session_holders"))
    return [
        f"GRANT USAGE ON SCHEMA public TO {user}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {user}",
        f"GRANT USAGE, SELECT, UPDATE ON SEQUENCE {prefix}_fence_seq TO {user}",
    ]


def pg_url(srv: ServerProc, user: str, password: str, query: str) -> str:
    return f"postgresql://{user}:{password}@{LOOPBACK}:{srv.port}/{pg_srv.DATABASE}?{query}"


def pg_role(srv: ServerProc, *grants: str) -> str:
    user = f"app_{uuid.uuid4().hex[:8]}"
    conn = pg_srv.admin(srv, pg_srv.DATABASE)
    try:
        conn.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{APP_PW}'")
        for grant in grants:
            conn.execute(grant.format(user=user))
    finally:
        conn.close()
    return user


def pg_rows(srv: ServerProc, prefix: str) -> int:
    conn = pg_srv.admin(srv, pg_srv.DATABASE)
    try:
        total = 0
        for t in ("holders", "queue"):  # session records are checked against the live locks, not deleted
            row = conn.execute(f"SELECT count(*) FROM {prefix}_{t}").fetchone()
            total += int(row[0]) if row else 0
        return total
    finally:
        conn.close()


def test_postgres_role_without_create_after_distlock_init(pg: ServerProc) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    user = pg_role(pg, "GRANT USAGE ON SCHEMA public TO {user}")
    app = pg_url(pg, user, APP_PW, f"table_prefix={prefix}")
    with pytest.raises(distlock.BackendError) as err:  # first use needs CREATE: no tables yet
        distlock.connect(app)
    assert "permission denied" in one_line_without_secrets(err.value)

    done = distlock_init(pg_url(pg, pg_srv.USER, pg_srv.PASSWORD, f"table_prefix={prefix}"))
    assert done.returncode == 0, done.stderr
    assert "in place" in done.stdout and pg_srv.PASSWORD not in done.stdout + done.stderr
    conn = pg_srv.admin(pg, pg_srv.DATABASE)
    try:
        for grant in pg_grants(prefix, user):
            conn.execute(grant)
    finally:
        conn.close()

    exercise(app, "lease")
    exercise(pg_url(pg, user, APP_PW, f"table_prefix={prefix}&mode=session"), "session")
    assert pg_rows(pg, prefix) == 0

    with pytest.raises(distlock.BackendError) as err:
        distlock.connect(pg_url(pg, user, "not-" + APP_PW, f"table_prefix={prefix}"))
    one_line_without_secrets(err.value)


def _tables_without(pg: ServerProc, *columns: tuple[str, str]) -> tuple[str, str, str]:
    """Tables made by the admin's ``distlock init`` under a fresh prefix, then the ``columns`` (table, column)
    dropped (as an earlier version made them), and a role with DML only: (prefix, admin's URL, the role's URL)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    admin_url = pg_url(pg, pg_srv.USER, pg_srv.PASSWORD, f"table_prefix={prefix}")
    assert distlock_init(admin_url).returncode == 0
    user = pg_role(pg)
    conn = pg_srv.admin(pg, pg_srv.DATABASE)
    try:
        for table, column in columns:
            conn.execute(f"ALTER TABLE {prefix}_{table} DROP COLUMN {column}")
        for grant in pg_grants(prefix, user):
            conn.execute(grant)
    finally:
        conn.close()
    return prefix, admin_url, pg_url(pg, user, APP_PW, f"table_prefix={prefix}")


@pytest.mark.parametrize(("column", "flag"), [("owner", "handover"), ("reply", "replies")])
def test_postgres_queue_table_from_an_earlier_version(
    pg: ServerProc, caplog: pytest.LogCaptureFixture, column: str, flag: str
) -> None:
    """A queue table without a column this version writes and a role that may not alter it: ``owner`` (made
    before the direct hand-over: the store runs without hand-overs, a release wakes the next waiter) or
    ``reply`` (made before the stores' own NOTIFY channels: hand-overs are told on the shared channel). The
    store says so once and every lock kind still works; the admin's ``distlock init`` adds the column, and
    the next store uses it."""
    prefix, admin_url, app = _tables_without(pg, ("queue", column))
    with caplog.at_level("WARNING", logger="distlock"), distlock.connect(app) as store:
        assert not getattr(store._backend.ops, flag)  # type: ignore[attr-defined]
        assert any(f"no {column} column" in r.getMessage() for r in caplog.records), caplog.records
        assert all(APP_PW not in r.getMessage() for r in caplog.records)
        exercise(app, "lease")
    assert pg_rows(pg, prefix) == 0

    assert distlock_init(admin_url).returncode == 0
    caplog.clear()
    with caplog.at_level("WARNING", logger="distlock"), distlock.connect(app) as store:
        assert getattr(store._backend.ops, flag)  # type: ignore[attr-defined]
        assert not any(f"no {column} column" in r.getMessage() for r in caplog.records)


def test_postgres_tables_from_before_weighted_semaphores_and_a_role_that_cannot_alter_them(
    pg: ServerProc, caplog: pytest.LogCaptureFixture
) -> None:
    """Lease tables without the semaphore columns and a role that may not add them: the store says so once and
    refuses semaphores in one line (``UnsupportedFeature``), every other kind works; the admin's ``distlock
    init`` adds the columns, and the next store takes weighted permits."""
    from distlock._backends.sql.dialects import WEIGHT_COLUMNS

    drops = [(table, column) for table, columns in WEIGHT_COLUMNS.items() for column in columns]
    prefix, admin_url, app = _tables_without(pg, *drops)
    with caplog.at_level("WARNING", logger="distlock"), distlock.connect(app) as store:
        assert not store._backend.ops.weights  # type: ignore[attr-defined]
        assert [r for r in caplog.records if "semaphores are refused" in r.getMessage()]
        with pytest.raises(distlock.UnsupportedFeature) as err:
            store.semaphore("sem", permits=2).acquire(timeout=5)
        assert "distlock init" in one_line_without_secrets(err.value)
        lock = store.lock("lock", ttl=5)
        assert lock.acquire(timeout=5)
        lock.release()
    assert distlock_init(admin_url).returncode == 0
    with distlock.connect(app) as store:
        sem = store.semaphore("sem", permits=3, ttl=5)
        assert sem.acquire(timeout=5, permits=2) and sem.hold_count == 2
        sem.release()
    assert pg_rows(pg, prefix) == 0


def test_postgres_role_without_dml_is_refused_in_one_line_and_leaves_nothing(pg: ServerProc) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    done = distlock_init(pg_url(pg, pg_srv.USER, pg_srv.PASSWORD, f"table_prefix={prefix}"))
    assert done.returncode == 0, done.stderr
    tables = ", ".join(f"{prefix}_{t}" for t in ("fences", "holders", "queue", "session_holders"))
    user = pg_role(pg, "GRANT USAGE ON SCHEMA public TO {user}", f"GRANT SELECT ON {tables} TO {{user}}")
    with pytest.raises(distlock.BackendError) as err:
        with distlock.connect(pg_url(pg, user, APP_PW, f"table_prefix={prefix}")) as store:
            store.lock("x", ttl=5).acquire(timeout=5)
    assert "permission denied" in one_line_without_secrets(err.value)
    assert pg_rows(pg, prefix) == 0


# -- MariaDB ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def maria() -> Iterator[ServerProc]:
    if my_srv.mariadb_binary() is None:
        pytest.skip("MariaDB is not installed")
    with my_srv.mariadb_server() as srv:
        yield srv


def my_grants(database: str, user: str) -> list[str]:
    """What the application's user needs once ``distlock init`` created the tables (and sequence)."""
    return [f"GRANT SELECT, INSERT, UPDATE, DELETE ON {database}.* TO {user}"]


def my_url(srv: ServerProc, user: str, password: str, query: str) -> str:
    return f"mysql://{user}:{password}@{LOOPBACK}:{srv.port}/{my_srv.DATABASE}?{query}"


def my_user(srv: ServerProc, privileges: str) -> str:
    user = f"app_{uuid.uuid4().hex[:8]}"
    conn = my_srv.admin(srv)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'{LOOPBACK}' IDENTIFIED BY '{APP_PW}'")
            cur.execute(f"GRANT {privileges} ON {my_srv.DATABASE}.* TO '{user}'@'{LOOPBACK}'")
    finally:
        conn.close()
    return user


def my_rows(srv: ServerProc, prefix: str) -> int:
    conn = my_srv.admin(srv)
    try:
        total = 0
        with conn.cursor() as cur:
            for t in ("holders", "queue"):  # session records are checked against the live locks, not deleted
                cur.execute(f"SELECT count(*) FROM {my_srv.DATABASE}.{prefix}_{t}")
                row = cur.fetchone()
                total += int(row[0]) if row else 0
        return total
    finally:
        conn.close()


def test_mariadb_user_without_create_after_distlock_init(maria: ServerProc) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    user = my_user(maria, "SELECT, INSERT, UPDATE, DELETE")  # DML only: exactly my_grants()
    app = my_url(maria, user, APP_PW, f"table_prefix={prefix}")
    with pytest.raises(distlock.BackendError) as err:  # first use needs CREATE: no tables yet
        distlock.connect(app)
    assert "denied" in one_line_without_secrets(err.value)

    done = distlock_init(my_url(maria, my_srv.USER, my_srv.PASSWORD, f"table_prefix={prefix}"))
    assert done.returncode == 0, done.stderr
    assert "in place" in done.stdout and my_srv.PASSWORD not in done.stdout + done.stderr

    exercise(app, "lease")
    exercise(my_url(maria, user, APP_PW, f"table_prefix={prefix}&mode=session"), "session")
    assert my_rows(maria, prefix) == 0

    with pytest.raises(distlock.BackendError) as err:
        distlock.connect(my_url(maria, user, "not-" + APP_PW, f"table_prefix={prefix}"))
    one_line_without_secrets(err.value)


def test_mariadb_user_without_dml_is_refused_in_one_line_and_leaves_nothing(maria: ServerProc) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    done = distlock_init(my_url(maria, my_srv.USER, my_srv.PASSWORD, f"table_prefix={prefix}"))
    assert done.returncode == 0, done.stderr
    user = my_user(maria, "SELECT")
    with pytest.raises(distlock.BackendError) as err:
        with distlock.connect(my_url(maria, user, APP_PW, f"table_prefix={prefix}")) as store:
            store.lock("x", ttl=5).acquire(timeout=5)
    assert "denied" in one_line_without_secrets(err.value)
    assert my_rows(maria, prefix) == 0
