"""The asyncio half of the etcd backend's HTTP driver (``_etcd_sync.py`` is its threaded twin).

The backend is written once against these names (``scripts/gen_sync.py`` swaps the module): the only
differences between the sides are the httpx client class and how a streamed body is read line by line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

HTTPClient = httpx.AsyncClient


async def lines(response: httpx.Response) -> AsyncIterator[str]:
    """The streamed body of a JSON gateway response (watch), one JSON message per line."""
    async for line in response.aiter_lines():
        yield line
