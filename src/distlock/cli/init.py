"""``distlock init``: create what a store needs on the server, once, as a user that may create it.

Opening a SQL store creates its tables, sequences and indexes when they are missing (that is the only DDL
distlock ever runs); once they exist, opening runs none. So an admin runs ``distlock --url ADMIN_URL init``
with the same options the application uses (``table_prefix``, ``mode``, ``session_lock``), grants the
application's user DML on what it created (docs/access-control.md), and the application never needs CREATE.
On the other backends there is nothing to create: the command only checks that the URL works.
"""

from __future__ import annotations

from typing import Any

import click

from . import connect, default_url, one_line_errors, url_config

_SQL = {"mysql", "postgres"}


@click.command(name="init", short_help="Create the tables a SQL store needs (run once as a user that may CREATE).")
@click.pass_obj
def command(obj: dict[str, Any]) -> None:
    """Create the tables, sequences and indexes of the store at --url if they are missing, then exit.

    Run it once per database (and table_prefix) as a user with CREATE, with the URL options the
    application uses; the application's own user then needs only SELECT, INSERT, UPDATE, DELETE
    (docs/access-control.md lists the grants). Nothing to create on Redis, etcd, ZooKeeper or SQLite
    (a SQLite file is created by whoever opens it first): there it only checks the URL.
    """
    with one_line_errors(obj["debug"]):
        url = obj["url"] or default_url()
        config = url_config(url)
        with connect(url):
            pass
        if config.backend == "mysql" and "mode" not in config.params:
            # MariaDB's session mode keeps its fences in a table of its own, which only session-mode stores
            # create (a lease-mode store of an earlier deployment opens without CREATE): made here too, so one
            # init serves both modes of the application's user
            with connect(url + ("&" if "?" in url else "?") + "mode=session"):
                pass
        if config.backend in _SQL:
            click.echo(f"distlock init: the tables of {config.redacted} are in place")
        else:
            click.echo(f"distlock init: nothing to create on {config.scheme}:// ({config.redacted} answers)")
