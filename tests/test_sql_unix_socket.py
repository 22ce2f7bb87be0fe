"""The unix-socket URL forms of the SQL backends, on the servers the fixtures start:
``postgresql://user@/db?host=<socket dir>&port=N`` (libpq's form) and ``mysql://user@/db?unix_socket=<path>``
(PyMySQL's). The socket is asked of the server itself (``unix_socket_directories``, ``@@socket``), and the
server confirms that the store's connections came through it, not over TCP. A wrong socket path is a one-line
``BackendError`` without the password.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

import distlock
from distlock._url import parse_url
from tests.test_sql_faults import one, raw_conn

DBS = ["mysql", "postgres"]


@pytest.fixture(params=DBS)
def db(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(db: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{db}_url"))


def socket_url(db: str, url: str, extra: str = "") -> str:
    """The TCP ``url``'s server, reached through its unix socket (same user, password and database)."""
    cfg = parse_url(url)
    userinfo = f"{quote(cfg.username or '', safe='')}:{quote(cfg.password or '', safe='')}@"
    conn = raw_conn(db, url)
    try:
        if db == "postgres":
            try:  # the spawner grants pg_read_all_settings; a server of $DISTLOCK_TEST_POSTGRES_URL may not
                directories = str(one(conn, "SHOW unix_socket_directories"))
            except psycopg.errors.InsufficientPrivilege:
                pytest.skip("the test user may not read unix_socket_directories")
            directory = directories.split(",")[0].strip()
            query = f"host={quote(directory)}&port={cfg.hosts[0][1]}"
            scheme = "postgresql"
        else:
            query = f"unix_socket={quote(str(one(conn, 'SELECT @@socket')))}"
            scheme = "mysql"
    finally:
        conn.close()
    return f"{scheme}://{userinfo}{cfg.path}?{query}{extra}"


def socket_clients(db: str, url: str) -> int:
    """How many connections of the URL's user the server sees coming through its unix socket."""
    cfg = parse_url(url)
    conn = raw_conn(db, url)
    try:
        if db == "postgres":  # a unix-socket client has no address and port -1
            sql = "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND client_port = -1"
        else:  # over the socket the client's host is 'localhost' ('127.0.0.1:port' over TCP)
            sql = "SELECT COUNT(*) FROM information_schema.processlist WHERE user = %s AND host = 'localhost'"
        return int(one(conn, sql, cfg.username))
    finally:
        conn.close()


@pytest.mark.parametrize("mode", ["lease", "session"])
def test_lock_through_the_unix_socket(db: str, url: str, mode: str) -> None:
    sock = socket_url(db, url, f"&mode={mode}")
    before = socket_clients(db, url)
    with distlock.connect(sock) as store, distlock.connect(url, mode=mode) as tcp:
        assert str(parse_url(url).password) not in repr(store)
        with store.lock("unix/one", ttl=10) as lock:
            assert lock.owned()
            assert socket_clients(db, url) > before  # the store's connections use the socket
            # one lock whichever way the server was reached
            assert not tcp.lock("unix/one", ttl=10).acquire(blocking=False)
        assert tcp.lock("unix/one", ttl=10).acquire(timeout=5)
        tcp.break_lock("unix/one")


def test_lock_through_the_unix_socket_async(db: str, url: str) -> None:
    sock = socket_url(db, url)

    async def main() -> Any:
        async with await distlock.connect_async(sock) as store, store.lock("unix/async", ttl=10) as lock:
            return lock.fence

    assert asyncio.run(main()) is not None


def test_a_missing_socket_is_a_one_line_error_without_the_password(db: str, url: str, tmp_path: Any) -> None:
    password = parse_url(url).password
    assert password
    missing = tmp_path / "no-such-dir"
    if db == "postgres":
        sock = f"postgresql://u:{password}@/db?host={missing}&port=5999&connect_timeout=2"
    else:
        sock = f"mysql://u:{password}@/db?unix_socket={missing}/mysqld.sock&connect_timeout=2"
    with pytest.raises(distlock.BackendError) as err:
        distlock.connect(sock)
    message = str(err.value)
    assert "\n" not in message and password not in message, message
    assert str(missing) in message or "socket" in message.lower() or "connect" in message, message


@pytest.mark.parametrize(
    ("url", "hosts", "params"),
    [
        ("postgresql:///db?host=/var/run/postgresql", [("/var/run/postgresql", 5432)], {}),
        ("postgres://u:pw@/db?host=/tmp/pg&port=5433&mode=session", [("/tmp/pg", 5433)], {"mode": "session"}),
        ("mysql:///db?unix_socket=/run/mysqld/mysqld.sock", [("localhost", 3306)],
         {"unix_socket": "/run/mysqld/mysqld.sock"}),
    ],
)  # fmt: skip
def test_socket_url_forms(url: str, hosts: list[tuple[str, int]], params: dict[str, str]) -> None:
    cfg = parse_url(url)
    assert cfg.hosts == hosts and cfg.params == params and cfg.path == "/db"
    assert "pw" not in cfg.redacted


@pytest.mark.parametrize(
    "url",
    [
        "postgresql:///db",  # no host at all
        "postgresql:///db?host=db.internal",  # a TCP host belongs in the URL
        "postgresql:///db?host=/tmp/pg&port=99999",
        "mysql:///db",
        "mysql:///db?unix_socket=",
    ],
)
def test_socket_url_mistakes_are_config_errors(url: str) -> None:
    with pytest.raises(distlock.ConfigError):
        parse_url(url)
