"""A store warns nothing in a program run under ``python -W error`` (as a service's test suite with pytest's
``filterwarnings = error`` runs it), on every backend, through both APIs: connect, a lock held and released, close.

The suite turns warnings into errors too, but it imports the drivers and makes their first clients in a process
whose warning filters and ``__warningregistry__`` have seen a whole session; here each backend gets a fresh
interpreter, as a user's program would (not ``-X dev``: its asyncio debug mode logs any step slower than
0.1 s, which a loaded machine makes). It found redis-py 8.2's UserWarning at every asyncio connect (a threaded
``redis.retry.Retry`` given to redis.asyncio's clients, on one node, Sentinel, Cluster and Redlock alike).
"""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import asyncio, sys
import distlock

url = sys.argv[1]
with distlock.connect(url) as store:
    with store.lock("no-warnings/sync", ttl=10, timeout=10) as lock:
        assert lock.fence is not None

async def main() -> None:
    store = await distlock.connect_async(url)
    async with store:
        async with store.lock("no-warnings/async", ttl=10, timeout=10) as lock:
            assert lock.fence is not None

asyncio.run(main())
"""


def test_a_store_under_python_w_error_warns_nothing(backend_url: str) -> None:
    r = subprocess.run(
        [sys.executable, "-W", "error", "-c", PROGRAM, backend_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r.stderr[-3000:]
