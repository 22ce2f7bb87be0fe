"""mariadbd processes: a fresh data directory from ``mariadb-install-db``, loopback TCP, a socket in the temp dir.

The server is started without ``--skip-grant-tables``: tests connect over TCP as the user ``distlock``
with a password (created through the root account on the private unix socket), so a wrong password
really fails.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .proc import LOOPBACK, ServerProc, free_port, which, workdir

if TYPE_CHECKING:  # imported where used: ``--spawn`` runs without the [mysql] extra or pytest
    import pymysql

USER = "distlock"
PASSWORD = "s3cret-pw"
DATABASE = "distlock"


def mariadb_binary() -> str | None:
    return which("mariadbd", "mysqld")


def _as_root_flag() -> list[str]:
    return ["--user=root"] if os.geteuid() == 0 else []


def admin(srv: ServerProc) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
    """A root connection over the server's private unix socket (no password)."""
    import pymysql

    return pymysql.connect(
        unix_socket=str(srv.workdir / "mysqld.sock"), user="root", autocommit=True, connect_timeout=5
    )


def start_mariadb(
    dirpath: Path,
    name: str = "mariadb",
    port: int | None = None,
    wrap: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> ServerProc:
    """Start (``mariadb-install-db`` first if ``dirpath/name`` is new) a server; ``wrap`` goes in front of the
    ``mariadbd`` command only (e.g. :func:`~tools.servers.proc.faketime_prefix`), ``extra`` server options after
    it (e.g. TLS files)."""
    binary = mariadb_binary()
    install = which("mariadb-install-db", "mysql_install_db")
    if binary is None or install is None:
        raise RuntimeError("mariadb-server is not installed (scripts/install_servers.sh installs it)")
    port = port or free_port()
    d = dirpath / name
    data = d / "data"
    # A temp dir of its own: the bootstrap and the server make (and at start delete) temporary tables in the
    # default /tmp, and two servers set up at once (one per test worker) removed each other's files there
    # ("Error on delete of '/tmp/#sql-temptable-...'": the install failed about one run in ten).
    tmp = d / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    if not data.exists():
        done = subprocess.run(
            [install, "--no-defaults", f"--datadir={data}", "--auth-root-authentication-method=normal",
             "--skip-test-db", *_as_root_flag(), f"--tmpdir={tmp}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120, text=True,
        )  # fmt: skip
        if done.returncode != 0:  # say why (the tool's own last lines), not only that it failed
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"mariadb-install-db failed (exit {done.returncode}) for {data}:\n{tail}")
    argv = [
        *wrap, binary, "--no-defaults", f"--datadir={data}", f"--bind-address={LOOPBACK}", f"--port={port}",
        f"--socket={d / 'mysqld.sock'}", f"--pid-file={d / 'mysqld.pid'}", f"--tmpdir={tmp}", "--skip-log-bin",
        "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--max-connections=500",
        "--innodb-flush-log-at-trx-commit=2", "--skip-name-resolve", *_as_root_flag(), *extra,
    ]  # fmt: skip
    srv = ServerProc(name, argv, port, d)
    srv.start(ready=lambda: (d / "mysqld.sock").exists() and _ping(srv))
    conn = admin(srv)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
            for host in ("127.0.0.1", "localhost"):
                cur.execute(f"CREATE USER IF NOT EXISTS '{USER}'@'{host}' IDENTIFIED BY '{PASSWORD}'")
                cur.execute(f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'{host}'")
                # KILL of other users' connections in the fault tests needs CONNECTION ADMIN / PROCESS
                cur.execute(f"GRANT PROCESS, CONNECTION ADMIN ON *.* TO '{USER}'@'{host}'")
    finally:
        conn.close()
    srv.url = f"mysql://{USER}:{PASSWORD}@{LOOPBACK}:{port}/{DATABASE}"
    return srv


def _ping(srv: ServerProc) -> bool:
    conn = admin(srv)
    conn.close()
    return True


@contextlib.contextmanager
def mariadb_server() -> Iterator[ServerProc]:
    with workdir("mariadb") as d:
        srv = start_mariadb(d)
        try:
            yield srv
        finally:
            srv.stop(grace=20)
