"""Servers that speak TLS only, with certificates the test run makes (``trustme``, on top of ``cryptography``).

:func:`make_certs` writes a throw-away CA, a server certificate for 127.0.0.1 and a client certificate, both
signed by it, and a second CA that signed neither (the "wrong CA" of the tests). Each ``*_tls`` context manager
starts one server family from the installed binaries (``tools/servers/``) with its TLS port the only one clients
can use, requiring a client certificate signed by the test CA (mutual TLS), so a URL that connects proves the
CA file, the client certificate and the key all reached the handshake. Every server listens on 127.0.0.1 only
and is stopped by PID.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization

from tools.servers import mysql as mysql_srv
from tools.servers import postgres as pg_srv
from tools.servers.etcd import etcd_tls_member
from tools.servers.proc import LOOPBACK, ServerProc, free_ports, workdir
from tools.servers.redis import start_redis
from tools.servers.zookeeper import ZkEnsemble, make_ensemble

#: the password of every TLS server's account (the tests check that no error message carries it)
PASSWORD = "tls-s3cret-pw"


@dataclass(frozen=True)
class Certs:
    ca: Path  #: the CA that signed the server and client certificates
    wrong_ca: Path  #: a CA that signed neither
    server_cert: Path  #: the server's certificate chain
    server_key: Path  #: its key (PKCS#8)
    server_pem: Path  #: key and chain in one file (ZooKeeper's PEM key store)
    client_cert: Path
    client_key: Path

    def client_query(self, ca: Path | None = None) -> str:
        """The common URL options of a client that trusts ``ca`` (default: the right one) and shows its cert."""
        return f"cafile={ca or self.ca}&certfile={self.client_cert}&keyfile={self.client_key}"


def _pkcs8(key: trustme.Blob) -> bytes:
    # trustme writes the "traditional" OpenSSL key format; ZooKeeper's PEM loader reads PKCS#8 only
    loaded = serialization.load_pem_private_key(key.bytes(), password=None)
    return loaded.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_certs(d: Path) -> Certs:
    """Write the CA, the wrong CA, the server's and a client's certificates into ``d`` (readable by a server
    that drops root, e.g. PostgreSQL as ``postgres``: the key files then belong to it, mode 0600)."""
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    # RSA keys: ZooKeeper 3.8's PEM loader reads RSA keys, not every EC encoding
    ca, wrong = trustme.CA(key_type=trustme.KeyType.RSA), trustme.CA(key_type=trustme.KeyType.RSA)
    server = ca.issue_cert(LOOPBACK, "localhost", key_type=trustme.KeyType.RSA)
    client = ca.issue_cert("distlock-test-client", key_type=trustme.KeyType.RSA)
    certs = Certs(
        ca=d / "ca.pem",
        wrong_ca=d / "wrong-ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        server_pem=d / "server-keystore.pem",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
    )
    ca.cert_pem.write_to_path(str(certs.ca))
    wrong.cert_pem.write_to_path(str(certs.wrong_ca))
    chain = b"".join(blob.bytes() for blob in server.cert_chain_pems)
    certs.server_cert.write_bytes(chain)
    certs.server_key.write_bytes(_pkcs8(server.private_key_pem))
    certs.server_pem.write_bytes(_pkcs8(server.private_key_pem) + chain)
    certs.client_cert.write_bytes(b"".join(blob.bytes() for blob in client.cert_chain_pems))
    certs.client_key.write_bytes(_pkcs8(client.private_key_pem))
    for path in (certs.server_key, certs.server_pem, certs.client_key):
        os.chmod(path, 0o600)
    if os.geteuid() == 0:  # PostgreSQL runs as ``postgres`` and insists on owning its key file
        with contextlib.suppress(KeyError, LookupError):
            shutil.chown(certs.server_key, "postgres", "postgres")
    return certs


# -- one context manager per server family ---------------------------------------------------------------
@contextlib.contextmanager
def redis_tls(d: Path, certs: Certs, n: int = 3) -> Iterator[list[ServerProc]]:
    """``n`` redis-servers whose plain port is off: a TLS port, a password, client certificates required."""
    servers: list[ServerProc] = []
    try:
        for i, port in enumerate(free_ports(n)):
            args = [
                "--port", "0", "--tls-port", str(port), "--requirepass", PASSWORD,
                "--tls-cert-file", str(certs.server_cert), "--tls-key-file", str(certs.server_key),
                "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "yes",
            ]  # fmt: skip
            servers.append(start_redis(d, f"redis-tls{i}", port, *args))
        yield servers
    finally:
        for s in servers:
            s.stop()


@contextlib.contextmanager
def etcd_tls(certs: Certs) -> Iterator[ServerProc]:
    with etcd_tls_member(certs.server_cert, certs.server_key, certs.ca, (certs.client_cert, certs.client_key)) as m:
        yield m


@contextlib.contextmanager
def postgres_tls(d: Path, certs: Certs) -> Iterator[ServerProc]:
    """PostgreSQL with ``ssl=on`` and a pg_hba.conf that accepts TCP clients over TLS only (``hostssl``), with a
    client certificate signed by the test CA and the password (scram)."""
    srv = pg_srv.start_postgres(
        d, "postgres-tls",
        extra=["-c", "ssl=on", "-c", f"ssl_cert_file={certs.server_cert}", "-c", f"ssl_key_file={certs.server_key}",
               "-c", f"ssl_ca_file={certs.ca}"],
    )  # fmt: skip
    try:
        hba = srv.workdir / "data" / "pg_hba.conf"
        lines = [ln for ln in hba.read_text().splitlines() if not ln.startswith("host")]
        lines.append(f"hostssl all all {LOOPBACK}/32 scram-sha-256 clientcert=verify-ca")
        hba.write_text("\n".join(lines) + "\n")
        conn = pg_srv.admin(srv)
        try:
            conn.execute(f"ALTER ROLE {pg_srv.USER} PASSWORD '{PASSWORD}'")
            conn.execute("SELECT pg_reload_conf()")
        finally:
            conn.close()
        srv.url = f"postgresql://{pg_srv.USER}:{PASSWORD}@{LOOPBACK}:{srv.port}/{pg_srv.DATABASE}"
        yield srv
    finally:
        pg_srv.stop_postgres(srv)


@contextlib.contextmanager
def mariadb_tls(d: Path, certs: Certs) -> Iterator[ServerProc]:
    """MariaDB that refuses TCP clients without TLS (``require_secure_transport``) and whose test account
    must show a certificate signed by the test CA (``REQUIRE X509``)."""
    srv = mysql_srv.start_mariadb(
        d, "mariadb-tls",
        extra=[f"--ssl-cert={certs.server_cert}", f"--ssl-key={certs.server_key}", f"--ssl-ca={certs.ca}",
               "--require-secure-transport=ON"],
    )  # fmt: skip
    try:
        conn = mysql_srv.admin(srv)
        try:
            with conn.cursor() as cur:
                for host in ("127.0.0.1", "localhost"):
                    cur.execute(f"ALTER USER '{mysql_srv.USER}'@'{host}' IDENTIFIED BY '{PASSWORD}' REQUIRE X509")
        finally:
            conn.close()
        srv.url = f"mysql://{mysql_srv.USER}:{PASSWORD}@{LOOPBACK}:{srv.port}/{mysql_srv.DATABASE}"
        yield srv
    finally:
        srv.stop(grace=20)


@dataclass
class ZkTls:
    ensemble: ZkEnsemble
    secure_port: int

    @property
    def hosts(self) -> str:
        return f"{LOOPBACK}:{self.secure_port}"


@contextlib.contextmanager
def zookeeper_tls(d: Path, certs: Certs) -> Iterator[ZkTls]:
    """A standalone ZooKeeper with a secure client port (the Netty connection factory, PEM key and trust
    stores, client certificates required). Its plain client port stays on for the harness's ``srvr`` check
    only; the tests use the secure one."""
    ens = make_ensemble(d / "zk-tls", 1)
    (secure_port,) = free_ports(1)
    ens.extra_config = [f"secureClientPort={secure_port}", f"secureClientPortAddress={LOOPBACK}"]
    ens.java_opts = [
        "-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        f"-Dzookeeper.ssl.keyStore.location={certs.server_pem}",
        "-Dzookeeper.ssl.keyStore.type=PEM",
        f"-Dzookeeper.ssl.trustStore.location={certs.ca}",
        "-Dzookeeper.ssl.trustStore.type=PEM",
        "-Dzookeeper.ssl.clientAuth=need",
    ]
    try:
        ens.start()
        yield ZkTls(ens, secure_port)
    finally:
        ens.stop()


@contextlib.contextmanager
def tls_workdir() -> Iterator[tuple[Path, Certs]]:
    with workdir("tls") as d:
        yield d, make_certs(d / "certs")
