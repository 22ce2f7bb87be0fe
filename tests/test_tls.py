"""TLS on every backend that offers it, against real servers that speak TLS only (``tests/tls_servers.py``):
Redis (one node) and Redlock (three masters), etcd, PostgreSQL, MariaDB and ZooKeeper's secure client port.

Each server requires a client certificate signed by the test CA, so a store that connects shows that the
common options (``tls``, ``cafile``, ``certfile``, ``keyfile``, ``verify``: docs/operations.md#tls) reached the
driver. For each backend: a lock, its waiter path and fences over TLS (sync and async); a wrong CA, the
system's CAs and a plaintext client each fail with one line that carries no password, the plaintext one
within its connect timeout; ``verify=false`` connects without the CA. Bad TLS options are refused before any
connection is tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import distlock
from distlock import BackendError, ConfigError
from tests.tls_servers import (
    PASSWORD,
    Certs,
    etcd_tls,
    mariadb_tls,
    postgres_tls,
    redis_tls,
    tls_workdir,
    zookeeper_tls,
)
from tools.servers.etcd import etcd_binary
from tools.servers.mysql import mariadb_binary
from tools.servers.postgres import pg_bindir
from tools.servers.proc import LOOPBACK
from tools.servers.redis import redis_binary
from tools.servers.zookeeper import available as zookeeper_available

BACKENDS = ("redis", "redlock", "etcd", "postgres", "mysql", "zookeeper")
#: how long past its own timeout a failing connect may take on a loaded machine
SLACK = 4.0


@dataclass
class Target:
    """How to reach one TLS-only server: ``url(query)`` with TLS on (the TLS scheme, or ``tls=true`` on the
    plain one with ``scheme=False``) and the password in it where the server has one; ``plain`` speaks
    plain text to the same port, with a 1 s connect timeout."""

    make: Callable[[str, bool], str]
    plain: str
    #: etcd's TLS member has no users: its happy path goes without credentials
    password_ok: bool = True

    def url(self, query: str, scheme: bool = True) -> str:
        return self.make(query, scheme)


@pytest.fixture(scope="module")
def tls_dir() -> Iterator[tuple[Path, Certs]]:
    with tls_workdir() as found:
        yield found


def _need(ok: object, what: str) -> None:
    if not ok:
        pytest.skip(f"{what} is not installed (scripts/install_servers.sh installs it)")


@pytest.fixture(scope="module")
def redis_nodes(tls_dir: tuple[Path, Certs]) -> Iterator[list[int]]:
    _need(redis_binary(), "redis-server")
    with redis_tls(*tls_dir, n=3) as servers:
        yield [s.port for s in servers]


def _target(request: pytest.FixtureRequest, backend: str) -> Target:
    if backend in ("redis", "redlock"):
        ports = request.getfixturevalue("redis_nodes")
        hosts = ",".join(f"{LOOPBACK}:{p}" for p in (ports[:1] if backend == "redis" else ports))
        return Target(
            lambda q, s: f"{backend}{'s' if s else ''}://:{PASSWORD}@{hosts}/0?{q}{'' if s else '&tls=true'}",
            f"{backend}://:{PASSWORD}@{hosts}/0?connect_timeout=1",
        )
    if backend == "etcd":
        member = request.getfixturevalue("etcd_member")
        return Target(
            lambda q, s: f"etcd{'s' if s else ''}://{LOOPBACK}:{member}?{q}{'' if s else '&tls=true'}",
            f"etcd://root:{PASSWORD}@{LOOPBACK}:{member}?connect_timeout=1&timeout=1",
            password_ok=False,
        )
    if backend == "postgres":
        url = request.getfixturevalue("postgres_url")
        # libpq's default sslmode (prefer) tries TLS first: plain text is sslmode=disable
        return Target(lambda q, s: f"{url}?tls=true&{q}", f"{url}?sslmode=disable&connect_timeout=1")
    if backend == "mysql":
        url = request.getfixturevalue("mysql_url")
        return Target(lambda q, s: f"{url}?tls=true&{q}", f"{url}?connect_timeout=1")
    hosts = request.getfixturevalue("zookeeper_hosts")
    base = f"zookeeper://digest-user:{PASSWORD}@{hosts}"
    return Target(lambda q, s: f"{base}?tls=true&connect_timeout=5&{q}", f"{base}?connect_timeout=1")


def _serve(installed: object, what: str, server: AbstractContextManager[Any], attr: str) -> Iterator[Any]:
    """A module fixture's body: skip unless ``what`` is installed, else the started server's ``attr``."""
    _need(installed, what)
    with server as srv:
        yield getattr(srv, attr)


@pytest.fixture(scope="module")
def etcd_member(tls_dir: tuple[Path, Certs]) -> Iterator[int]:
    yield from _serve(etcd_binary(), "etcd", etcd_tls(tls_dir[1]), "port")


@pytest.fixture(scope="module")
def postgres_url(tls_dir: tuple[Path, Certs]) -> Iterator[str]:
    yield from _serve(pg_bindir(), "postgresql", postgres_tls(*tls_dir), "url")


@pytest.fixture(scope="module")
def mysql_url(tls_dir: tuple[Path, Certs]) -> Iterator[str]:
    yield from _serve(mariadb_binary(), "mariadb-server", mariadb_tls(*tls_dir), "url")


@pytest.fixture(scope="module")
def zookeeper_hosts(tls_dir: tuple[Path, Certs]) -> Iterator[str]:
    yield from _serve(zookeeper_available(), "zookeeper", zookeeper_tls(*tls_dir), "hosts")


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest) -> Target:
    return _target(request, request.param)


@pytest.fixture
def certs(tls_dir: tuple[Path, Certs]) -> Certs:
    return tls_dir[1]


def _one_line_without_password(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    assert PASSWORD not in text and PASSWORD not in repr(exc), text
    return text


# -- a lock over TLS -------------------------------------------------------------------------------------
def test_lock_waiter_and_fences_over_tls(target: Target, certs: Certs, name: str) -> None:
    with distlock.connect(target.url(certs.client_query())) as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire(timeout=5)
        first = lock.fence
        assert isinstance(first, int)
        assert not store.lock(name).acquire(timeout=0.2)  # the waiter path (pub/sub, watch, notify) over TLS too
        lock.release()
        assert lock.acquire(timeout=5)
        assert lock.fence is not None and lock.fence > first
        assert store.inspect(name) is not None
        lock.release()


async def test_async_lock_over_tls_with_tls_true(target: Target, certs: Certs, name: str) -> None:
    """``tls=true`` on the plain scheme (redis://, redlock://, etcd://) means the same as the TLS scheme."""
    store = await distlock.connect_async(target.url(certs.client_query(), scheme=False))
    try:
        lock = store.lock(name, ttl=5)
        assert await lock.acquire(timeout=5)
        assert isinstance(lock.fence, int)
        assert not await store.lock(name).acquire(timeout=0.2)
        await lock.release()
    finally:
        await store.aclose()


# -- failures: one line, no password, bounded ------------------------------------------------------------
def _secret(target: Target, query: str) -> str:
    """``target``'s URL with a password in it even where the server has no users (etcd)."""
    url = target.url(query)
    if target.password_ok:
        return url
    scheme, rest = url.split("://", 1)
    return f"{scheme}://root:{PASSWORD}@{rest}"


def test_wrong_ca_fails_at_once_with_one_line_and_no_password(target: Target, certs: Certs) -> None:
    started = time.monotonic()
    with pytest.raises(BackendError) as err:
        distlock.connect(_secret(target, certs.client_query(certs.wrong_ca)))
    text = _one_line_without_password(err.value)
    assert "certificate verify failed" in text or "not trusted" in text, text
    assert time.monotonic() - started < SLACK  # a refused certificate is not retried until a timeout


async def test_wrong_ca_fails_at_once_with_the_reason_on_asyncio_too(target: Target, certs: Certs) -> None:
    """The asyncio drivers (aiomysql, psycopg's, redis-py's) name the refused certificate too: aiomysql's own
    error for any failed connect is only "Can't connect to MySQL server on ..." (the reason in its cause)."""
    started = time.monotonic()
    with pytest.raises(BackendError) as err:
        await distlock.connect_async(_secret(target, certs.client_query(certs.wrong_ca)))
    text = _one_line_without_password(err.value)
    assert "certificate verify failed" in text or "not trusted" in text, text
    assert time.monotonic() - started < SLACK


def test_system_cas_do_not_trust_the_test_ca(target: Target, certs: Certs) -> None:
    query = f"certfile={certs.client_cert}&keyfile={certs.client_key}"  # no cafile: the system's CAs
    with pytest.raises(BackendError) as err:
        distlock.connect(_secret(target, query))
    _one_line_without_password(err.value)


def test_plaintext_client_to_the_tls_port_fails_within_its_connect_timeout(target: Target) -> None:
    started = time.monotonic()
    with pytest.raises(BackendError) as err:
        distlock.connect(target.plain)
    text = _one_line_without_password(err.value)
    assert "time-out" not in text, text  # what went wrong is named (kazoo alone says only "Connection time-out")
    assert time.monotonic() - started < 1.0 + SLACK


def test_verify_false_connects_without_the_ca(target: Target, certs: Certs, name: str) -> None:
    query = f"verify=false&certfile={certs.client_cert}&keyfile={certs.client_key}"
    with distlock.connect(target.url(query)) as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire(timeout=5)
        lock.release()


# -- the drivers' own option names still work ----------------------------------------------------------
@pytest.mark.parametrize("backend", ["redis", "postgres", "mysql"])
def test_driver_option_names_are_aliases(request: pytest.FixtureRequest, certs: Certs, backend: str, name: str) -> None:
    target = _target(request, backend)
    native = {
        "redis": f"ssl_ca_certs={certs.ca}&ssl_certfile={certs.client_cert}&ssl_keyfile={certs.client_key}",
        "postgres": f"sslrootcert={certs.ca}&sslcert={certs.client_cert}&sslkey={certs.client_key}",
        "mysql": f"ssl_ca={certs.ca}&ssl_cert={certs.client_cert}&ssl_key={certs.client_key}",
    }[backend]
    url = target.url(native)
    if backend == "postgres":  # libpq's own switch instead of tls=true
        url = url.replace("tls=true", "sslmode=verify-full")
    if backend == "mysql":  # PyMySQL's convention: ssl_ca alone turns TLS on
        url = url.replace("tls=true&", "")
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire(timeout=5)
        lock.release()


# -- bad options: refused before any connection is tried ------------------------------------------------
def _bad_cases(tmp: Path) -> list[tuple[str, str]]:
    garbage = tmp / "garbage.pem"
    garbage.write_text("not a certificate\n")
    ca = tmp / "exists.pem"
    ca.write_text("")
    pw = PASSWORD
    return [
        (f"etcd://127.0.0.1:1?cafile={ca}", "need TLS"),
        (f"zookeeper://u:{pw}@127.0.0.1:1?cafile={ca}", "need TLS"),
        (f"redis://:{pw}@127.0.0.1:1/0?ssl_ca_certs={ca}", "need TLS"),
        (f"redlock://:{pw}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/0?verify=false", "need TLS"),
        (f"postgresql://u:{pw}@127.0.0.1:1/db?cafile={ca}", "need TLS"),
        (f"mysql://u:{pw}@127.0.0.1:1/db?certfile={ca}", "need TLS"),
        (f"rediss://:{pw}@127.0.0.1:1/0?cafile={tmp / 'missing.pem'}", "cafile="),
        (f"etcds://u:{pw}@127.0.0.1:1?cafile={garbage}", "cafile="),
        (f"zookeeper://u:{pw}@127.0.0.1:1?tls=true&certfile={garbage}", "certfile="),
        (f"rediss://:{pw}@127.0.0.1:1/0?keyfile={ca}", "keyfile needs certfile"),
        (f"rediss://:{pw}@127.0.0.1:1/0?cafile={ca}&ssl_ca_certs={ca}", "same option"),
        ("etcds://127.0.0.1:1?tls=false", "contradicts"),
        ("unix:///tmp/none.sock?tls=true", "unix"),
        (f"postgresql://u:{pw}@127.0.0.1:1/db?sslmode=require&verify=false", "sslmode and verify"),
        (f"mysql://u:{pw}@127.0.0.1:1/db?tls=maybe", "not a boolean"),
    ]


def test_bad_tls_options_are_one_line_config_errors(tmp_path: Path) -> None:
    for url, expected in _bad_cases(tmp_path):
        started = time.monotonic()
        with pytest.raises(ConfigError) as err:
            distlock.connect(url)
        text = _one_line_without_password(err.value)
        assert expected in text, (url, text)
        assert time.monotonic() - started < 1.0, url  # nothing was connected


async def test_a_mysql_connection_over_tls_ends_at_once_when_cut_or_closed(mysql_url: str, certs: Certs) -> None:
    """A MySQL call cut short on a TLS connection aborts it: the socket closes at once. aiomysql's own close
    starts a close_notify exchange, which a server busy with the statement does not answer: the socket stayed
    open, and once the event loop had ended, the garbage collector found it during some later test (which
    failed on the ResourceWarning)."""
    import asyncio
    import ssl

    from distlock._backends.mysql import _driver_async as my
    from distlock._url import parse_url
    from distlock.checker.proxy import FaultProxy

    cfg = parse_url(mysql_url)
    host, port = cfg.hosts[0]
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    kwargs = {"host": host, "port": port, "user": cfg.username, "password": cfg.password, "ssl": context,
              "database": cfg.path.lstrip("/"), "autocommit": True, "read_timeout": 5.0}  # fmt: skip
    conn = await my.connect(5.0, **kwargs)
    sock = conn._writer.transport.get_extra_info("socket")
    cur = await my.cursor(conn)
    task = asyncio.create_task(my.call(conn, time.monotonic() + 10, cur.execute, "SELECT SLEEP(2)"))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(3):  # the transport closes its socket in a callback of the next loop turn
        await asyncio.sleep(0)
    assert sock.fileno() == -1, "the socket is still open: the connection was closed, not aborted"
    assert not my.is_open(conn)
    # the goodbye too (a store's aclose), to a server that no longer answers: COM_QUIT, then the socket ends
    # at once, not when (if ever) the server answers the close_notify
    with FaultProxy(host, port) as proxy:
        conn = await my.connect(5.0, **{**kwargs, "port": proxy.port})
        sock = conn._writer.transport.get_extra_info("socket")
        proxy.freeze()
        await my.close(conn)
        for _ in range(3):
            await asyncio.sleep(0)
        assert sock.fileno() == -1, "the socket is still open after the goodbye"
