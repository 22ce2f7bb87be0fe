"""TLS: ``rediss://`` to one node and ``redlocks://`` to three masters, with a throw-away self-signed
certificate (openssl) and redis-server's own TLS port; the plain port is off."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import distlock
from distlock import BackendError
from tools.servers.proc import LOOPBACK, ServerProc, free_ports, workdir
from tools.servers.redis import start_redis

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a certificate")


@pytest.fixture(scope="module")
def tls_servers() -> Iterator[tuple[Path, list[ServerProc]]]:
    with workdir("redis-tls") as d:
        cert, key = d / "cert.pem", d / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", "1", "-subj", f"/CN={LOOPBACK}", "-addext", f"subjectAltName=IP:{LOOPBACK}"],
            check=True, capture_output=True,
        )  # fmt: skip
        servers: list[ServerProc] = []
        try:
            for i, port in enumerate(free_ports(3)):
                servers.append(
                    start_redis(
                        d,
                        f"tls{i}",
                        port,
                        "--port",
                        "0",
                        "--tls-port",
                        str(port),
                        "--tls-cert-file",
                        str(cert),
                        "--tls-key-file",
                        str(key),
                        "--tls-ca-cert-file",
                        str(cert),
                        "--tls-auth-clients",
                        "no",
                    )
                )
            yield cert, servers
        finally:
            for s in servers:
                s.stop()


def test_rediss_single_node(tls_servers: tuple[Path, list[ServerProc]], name: str) -> None:
    cert, servers = tls_servers
    url = f"rediss://{LOOPBACK}:{servers[0].port}/0?ssl_ca_certs={cert}"
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire()
        assert lock.fence == 1
        assert not store.lock(name).acquire(timeout=0.2)  # the waiter path (pub/sub) over TLS too
        lock.release()


def test_rediss_refuses_an_unknown_certificate(tls_servers: tuple[Path, list[ServerProc]]) -> None:
    _, servers = tls_servers
    with pytest.raises(BackendError):
        distlock.connect(f"rediss://{LOOPBACK}:{servers[0].port}/0?connect_timeout=2")  # system CAs only


def test_redlocks_three_masters(tls_servers: tuple[Path, list[ServerProc]], name: str) -> None:
    cert, servers = tls_servers
    hosts = ",".join(f"{LOOPBACK}:{s.port}" for s in servers)
    with distlock.connect(f"redlocks://{hosts}/0?ssl_ca_certs={cert}") as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire()
        assert lock.fence is not None
        lock.release()
