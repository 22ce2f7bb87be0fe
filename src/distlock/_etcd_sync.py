"""The threaded half of the etcd backend's HTTP driver (the same names as :mod:`distlock._etcd_async`)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx

HTTPClient = httpx.Client


def lines(response: httpx.Response) -> Iterator[str]:
    """The streamed body of a JSON gateway response (watch), one JSON message per line."""
    yield from response.iter_lines()
