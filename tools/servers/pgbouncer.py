"""PgBouncer in front of a test PostgreSQL: one process, one database alias per pooling mode.

``pgb_session``, ``pgb_transaction`` and ``pgb_statement`` all lead to the same PostgreSQL database, each
pooled in its mode; ``urls[mode]`` is the store URL through it. Authentication: an ``auth_file`` with the
test user's password, SCRAM on both sides. PgBouncer refuses to run as root: as root it runs as the
``postgres`` system user, as PostgreSQL does (``postgres._runas``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from .postgres import _runas
from .proc import LOOPBACK, ServerProc, free_port, port_open, which, workdir

MODES = ("session", "transaction", "statement")


def available() -> bool:
    return which("pgbouncer") is not None


def start_pgbouncer(dirpath: Path, pg_url: str, pool_size: int = 2) -> ServerProc:
    """PgBouncer in front of the PostgreSQL of ``pg_url`` (its user, password and database), ``pool_size``
    server connections in the transaction and statement pools (few: so that clients do share them)."""
    u = urlsplit(pg_url)
    user, password = unquote(u.username or ""), unquote(u.password or "")
    database = u.path.lstrip("/")
    exe = which("pgbouncer")
    if exe is None:
        raise RuntimeError("pgbouncer is not installed (scripts/install_servers.sh installs it)")
    port = free_port()
    d = dirpath / "pgbouncer"
    d.mkdir(parents=True, exist_ok=True)
    (d / "userlist.txt").write_text(f'"{user}" "{password}"\n')
    # session pooling takes a server connection per client connection: its pool must hold all of ours
    sizes = {m: 40 if m == "session" else pool_size for m in MODES}
    dbs = "\n".join(
        f"pgb_{m} = host={u.hostname} port={u.port} dbname={database} pool_mode={m} pool_size={sizes[m]}" for m in MODES
    )
    (d / "pgbouncer.ini").write_text(
        f"[databases]\n{dbs}\n\n[pgbouncer]\nlisten_addr = {LOOPBACK}\nlisten_port = {port}\n"
        "unix_socket_dir =\nauth_type = scram-sha-256\nauth_file = userlist.txt\n"
        "max_client_conn = 200\nserver_login_retry = 1\n"
        "log_connections = 0\nlog_disconnections = 0\n"
    )
    if os.geteuid() == 0:
        os.chmod(dirpath, 0o755)
        for p in (d, d / "userlist.txt", d / "pgbouncer.ini"):
            shutil.chown(p, "postgres", "postgres")
    srv = ServerProc("pgbouncer", [*_runas(), exe, "pgbouncer.ini"], port, d)
    srv.start(ready=lambda: port_open(port))
    srv.url = f"postgresql://{quote(user)}:{quote(password)}@{LOOPBACK}:{port}/"
    return srv


def url(srv: ServerProc, mode: str) -> str:
    """The store URL through ``srv`` in pooling ``mode``."""
    return f"{srv.url}pgb_{mode}"


@contextlib.contextmanager
def pgbouncer(pg_url: str) -> Iterator[ServerProc]:
    with workdir("pgbouncer") as d:
        srv = start_pgbouncer(d, pg_url)
        try:
            yield srv
        finally:
            srv.stop()
