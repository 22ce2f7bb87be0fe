"""distlock: distributed locks you can trust, one sync and asyncio API over many coordination systems.

>>> import distlock
>>> with distlock.connect("memory://") as store:
...     with store.lock("jobs/nightly", ttl=30) as lock:
...         assert lock.fence is not None

See README.md for every lock kind and backend.
"""

from __future__ import annotations

import logging

from . import fencing
from ._async.barrier import AsyncBarrier, AsyncDoubleBarrier
from ._async.election import AsyncElection
from ._async.latch import AsyncLatch
from ._async.locks import AsyncLock, AsyncReadWriteLock
from ._async.multilock import AsyncMultiLock
from ._async.once import AsyncOnce, AsyncRan
from ._async.semaphore import AsyncSemaphore
from ._async.store import AsyncStore, connect_async
from ._core.types import HolderInfo, LeaderInfo, LockInfo
from ._errors import (
    AcquireTimeout,
    BackendError,
    ConfigError,
    LockError,
    LockLost,
    NotHeld,
    QuorumError,
    StaleFence,
    UnsupportedFeature,
)
from ._sync.barrier import Barrier, DoubleBarrier
from ._sync.election import Election
from ._sync.latch import Latch
from ._sync.locks import Lock, ReadWriteLock
from ._sync.multilock import MultiLock
from ._sync.once import Once, Ran
from ._sync.semaphore import Semaphore
from ._sync.store import Store, connect
from .guards import etcd_guard

__version__ = "0.1.0"

# a library logs, the application decides where it goes (lost locks are logged as warnings)
logging.getLogger("distlock").addHandler(logging.NullHandler())

__all__ = [
    "AcquireTimeout",
    "AsyncBarrier",
    "AsyncDoubleBarrier",
    "AsyncElection",
    "AsyncLatch",
    "AsyncLock",
    "AsyncMultiLock",
    "AsyncOnce",
    "AsyncRan",
    "AsyncReadWriteLock",
    "AsyncSemaphore",
    "AsyncStore",
    "BackendError",
    "Barrier",
    "ConfigError",
    "DoubleBarrier",
    "Election",
    "HolderInfo",
    "Latch",
    "LeaderInfo",
    "Lock",
    "LockError",
    "LockInfo",
    "LockLost",
    "MultiLock",
    "NotHeld",
    "Once",
    "QuorumError",
    "Ran",
    "ReadWriteLock",
    "Semaphore",
    "StaleFence",
    "Store",
    "UnsupportedFeature",
    "__version__",
    "connect",
    "connect_async",
    "etcd_guard",
    "fencing",
]
