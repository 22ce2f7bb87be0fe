"""PostgreSQL processes: ``initdb`` into a temp dir, loopback TCP, the unix socket in the temp dir.

PostgreSQL refuses to run as root; when the tests run as root, ``initdb`` and ``postgres`` run as the
``postgres`` system user (created by the Debian package) through ``setpriv``. Password authentication
(scram) is on for TCP: tests connect as the user ``distlock`` with a password.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .proc import LOOPBACK, ServerProc, free_port, workdir

if TYPE_CHECKING:  # imported where used: the CLI starts without the [postgres] extra
    import psycopg

USER = "distlock"
PASSWORD = "s3cret-pw"
DATABASE = "distlock"


def pg_bindir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    exe = shutil.which("postgres")
    return os.path.dirname(exe) if exe else None


def _runas() -> list[str]:
    """Run as the ``postgres`` user when we are root. ``setpriv`` execs (no extra parent process), so the
    PID we signal is the postmaster itself."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]


def stop_postgres(srv: ServerProc, grace: float = 20.0) -> None:
    """Fast shutdown (SIGINT: disconnect clients, checkpoint), then the usual stop as a fallback."""
    if srv.alive() and srv.proc is not None:
        srv.signal(signal.SIGINT)
        try:
            srv.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    srv.stop(grace=1.0)


def admin(srv: ServerProc, dbname: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
    """A superuser connection over the private unix socket (trust auth on the socket only)."""
    import psycopg

    return psycopg.connect(host=str(srv.workdir), port=srv.port, user="postgres", dbname=dbname, autocommit=True,
                           connect_timeout=5)  # fmt: skip


def start_postgres(
    dirpath: Path,
    name: str = "postgres",
    port: int | None = None,
    wrap: Sequence[str] = (),
    durable: bool = False,
    extra: Sequence[str] = (),
) -> ServerProc:
    """Start (``initdb`` first if ``dirpath/name`` is new) a server; ``wrap`` goes in front of the ``postgres``
    command only, after ``setpriv`` (e.g. :func:`~tools.servers.proc.faketime_prefix`).

    By default commits are not waited for (``synchronous_commit=off``, ``fsync=off``: fast, and a kill -9 loses
    the last ~200 ms of commits). ``durable`` keeps PostgreSQL's defaults (a commit returns once its WAL is
    flushed), so a kill -9 of the server loses nothing that was committed. ``extra``: more server arguments
    (e.g. ``-c ssl=on``)."""
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError("postgresql is not installed (scripts/install_servers.sh installs it)")
    port = port or free_port()
    d = dirpath / name
    data = d / "data"
    fresh = not data.exists()
    if fresh:
        d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(d, "postgres", "postgres")
            os.chmod(dirpath, 0o755)
        subprocess.run(
            [*_runas(), f"{bindir}/initdb", "-D", str(data), "-U", "postgres", "--auth-local=trust",
             "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
        )  # fmt: skip
    argv = [
        *_runas(), *wrap, f"{bindir}/postgres", "-D", str(data), "-c", f"listen_addresses={LOOPBACK}", "-p", str(port),
        "-c", f"unix_socket_directories={d}", "-c", "max_connections=300", "-c", "shared_buffers=32MB",
        *([] if durable else ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]),
        *extra,
    ]  # fmt: skip
    srv = ServerProc(name, argv, port, d)
    srv.start(ready=lambda: _ping(srv))
    if fresh:
        conn = admin(srv)
        try:
            conn.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'")
            conn.execute(f"CREATE DATABASE {DATABASE} OWNER {USER}")
            # terminating other sessions in the fault tests
            conn.execute(f"GRANT pg_signal_backend TO {USER}")
            # reading unix_socket_directories: the unix-socket URL tests find the socket through the server
            conn.execute(f"GRANT pg_read_all_settings TO {USER}")
        finally:
            conn.close()
    srv.url = f"postgresql://{USER}:{PASSWORD}@{LOOPBACK}:{port}/{DATABASE}"
    return srv


def _ping(srv: ServerProc) -> bool:
    conn = admin(srv)
    conn.close()
    return True


@contextlib.contextmanager
def postgres_server() -> Iterator[ServerProc]:
    with workdir("postgres") as d:
        srv = start_postgres(d)
        try:
            yield srv
        finally:
            stop_postgres(srv)
