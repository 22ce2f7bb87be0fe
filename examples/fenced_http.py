"""A fenced HTTP service: two instances behind one lock refuse a stale caller with ``409 Conflict``.

    python examples/fenced_http.py

The service is a plain WSGI app (a tiny report store) wrapped in ``fencing.fenced_wsgi``, started twice on
loopback ports the way a service runs behind a load balancer. Both instances record the highest fence per
lock name in one shared table (``fencing.SqlFences``; an SQLite file here, your service's database in
production; ``fencing.RedisFences`` for Redis). The callers send ``fencing.header(lock.name, lock.fence)``.

A holder stalls past its lease (GC, SIGSTOP, a VM freeze). A new holder takes the lock and writes through
instance B. The stale holder wakes up and writes through instance A: A has never seen the newer fence
itself, but the shared table has, so A answers 409 and its app never runs.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import distlock
from distlock import fencing


def report_app(reports: dict[str, str]) -> Callable[..., Iterable[bytes]]:
    """The service itself: PUT /report stores the body; it knows nothing about locks or fences."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        size = int(environ.get("CONTENT_LENGTH") or 0)
        reports["report"] = environ["wsgi.input"].read(size).decode()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"stored\n"]

    return app


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the example's output to what it shows


@contextlib.contextmanager
def serving(app: Callable[..., Iterable[bytes]]) -> Iterator[str]:
    """``app`` on a free loopback port, in a thread, for the block: its base URL."""
    server: WSGIServer = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def put(base: str, lock_name: str, fence: int, body: str) -> int:
    """PUT ``body`` as the holder of ``lock_name`` with ``fence``: the HTTP status."""
    name, value = fencing.header(lock_name, fence)
    request = urllib.request.Request(f"{base}/report", data=body.encode(), method="PUT", headers={name: value})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        print(f"  refused: {refused.read().decode().strip()}")
        return refused.code


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="distlock-http-") as tmp:
        fence_db = Path(tmp) / "fences.db"
        with contextlib.closing(sqlite3.connect(fence_db)) as db:
            fencing.create_table(db)  # once, in the database the instances share
        fences = fencing.SqlFences(lambda: sqlite3.connect(fence_db, timeout=10))
        reports: dict[str, str] = {}  # the service's data (one store behind both instances)
        app = fencing.fenced_wsgi(report_app(reports), fences)
        with serving(app) as instance_a, serving(app) as instance_b, distlock.connect(f"sqlite:///{tmp}/locks.db") as store:
            slow = store.lock("report", ttl=0.5, auto_renew=False)
            assert slow.acquire()
            stale = slow.fence
            assert stale is not None  # (acquire() leaves it typed int | None; `with ... as held` gives an int)
            time.sleep(0.7)  # paused past its lease
            with store.lock("report", ttl=10) as fresh:
                fresh_status = put(instance_b, "report", fresh.fence, "fresh")
                print(f"new holder (fence {fresh.fence}) through instance B: {fresh_status}")
            stale_status = put(instance_a, "report", stale, "stale")
            print(f"stale holder (fence {stale}) through instance A: {stale_status}")
            with contextlib.suppress(distlock.LockLost):
                slow.release()
        print(f"stored report: {reports.get('report')!r}")
        return 0 if (fresh_status, stale_status, reports.get("report")) == (200, 409, "fresh") else 1


if __name__ == "__main__":
    sys.exit(main())
