"""Re-exports :mod:`distlock._servers.redis` (one implementation for the tests and ``--spawn``)."""

from distlock._servers.redis import (
    DURABLE,
    redis_binary,
    redis_masters,
    redis_replicated,
    redis_server,
    redlock_url,
    restart,
    start_redis,
)

__all__ = [
    "DURABLE",
    "redis_binary",
    "redis_masters",
    "redis_replicated",
    "redis_server",
    "redlock_url",
    "restart",
    "start_redis",
]
