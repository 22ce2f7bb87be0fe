"""The Redis tests run on the reply parser they name: redis-py's pure-Python one by default, hiredis when
``DISTLOCK_TEST_PARSER=hiredis`` (scripts/test.sh's second pass; tests/conftest.py). A pass that meant to
test hiredis but ran the pure-Python parser (or the other way round) fails here instead of passing unseen."""

from __future__ import annotations

import os

import redis
import redis.asyncio.connection
import redis.connection

import distlock


def test_the_suite_runs_on_the_parser_it_names(redis_url: str) -> None:
    hiredis = os.environ.get("DISTLOCK_TEST_PARSER", "python") == "hiredis"
    assert (redis.connection.DefaultParser.__name__ == "_HiredisParser") is hiredis
    assert (redis.asyncio.connection.DefaultParser.__name__ == "_AsyncHiredisParser") is hiredis
    # and a store's own connections (its requests, its wake-ups) are read with it
    with distlock.connect(redis_url) as store, store.lock("parser-check"):
        wire = store._backend.node.wire  # type: ignore[attr-defined]
        conn = wire.pop_idle()
        try:
            assert (type(conn._parser).__name__ == "_HiredisParser") is hiredis
        finally:
            wire.put(conn)
