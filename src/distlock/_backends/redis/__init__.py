"""The Redis family: a single node or a Redis Cluster (``redis://``, ``rediss://``, ``unix://``), Sentinel
(``redis+sentinel://``) and Redlock over N independent masters (``redlock://``). Driver: redis-py.

The folder, from the socket up:

* ``keys.py``: the key layout of a name, the wake-up channel, the fence counter's keys (pure);
* ``lua/``: the scripts and their grant rule, by name with their SHA1s (pure; ``prelude.py`` the helpers
  every script starts with, ``locks.py`` a holding's life, ``admin.py`` inspect, break, release requests and
  an election's proclaim, ``latch.py`` and ``barrier.py`` a latch's and a barrier's own one-key scripts);
* ``waiters.py``: who waits on which wake-up channel and which message wakes whom (the routing of the
  pub/sub listener; pure);
* ``calls.py``: requests and replies of the scripts: the pre-encoded ``EVALSHA`` of the hot path, the
  decoded ``INSPECT`` reply (pure);
* ``tls.py``: distlock's TLS URL options as redis-py's (no I/O);
* ``remap.py``: the ``remap`` URL option, the addresses a cluster or the sentinels announce mapped to the ones
  this client reaches (no I/O);
* ``_driver_async.py`` / ``_driver_sync.py``: the hand-kept driver seam pair, the only code that differs
  between redis.asyncio and redis (connecting, pipelines, bounding and dropping a connection); what both
  declare alike (the broken-connection errors, the connection maker's type) is ``_driver_shared.py`` (pure);
* ``_fanout_async.py`` / ``_fanout_sync.py``: the hand-kept pair of Redlock's fan-out, one request to several
  servers with one deadline (tasks on asyncio; on threads the calling thread, a small pool for the rest);
* ``_async/``: the backends, written once (``_sync/`` is generated from it by ``scripts/gen_sync.py``):

  * ``__init__.py``: the single-node/cluster ``Backend``: options at open, acquire with its fence and
    ``wait_replicas``, release, renewal batches, inspect/list/break;
  * ``options.py``: the URL options, the URL for redis-py, and distlock's own client for
    ``connect(client=...)``;
  * ``node.py``: one server or cluster (``Node``): scripts by name, calls and batches in one round trip,
    errors -> ``BackendError``;
  * ``wire.py``: distlock's own request path (pre-encoded calls on a free list of connections);
  * ``sentinel.py``: following a Sentinel failover at once (``SwitchWatch``);
  * ``listener.py``: the one pub/sub connection per server and store that turns releases into wake-ups:
    who reads it when (the read role of the waiters, the background reader), what a failed read does, the
    move after a failover; on ``subscriptions.py``: the connection and what is subscribed on it (linger,
    generations, re-subscribing everything), and the dispatch of a message through ``waiters.py``;
  * ``group.py``: a Redlock store's listeners, one per master, read together by its waiting threads;
  * ``attempt.py``: try / wait on the wake-up channel / abandon, single node and Redlock;
  * ``watch.py``: an election observer's wake-up, on the same channel and listener;
  * ``latch.py`` / ``barrier.py``: latches and barriers, each step one ``EVAL`` of ``lua/latch.py`` /
    ``lua/barrier.py`` on the primitive's own key;
  * ``fences.py``: the fence counter (markers, connect-time checks, the Redlock seeding rule);
  * ``releases.py``: what makes a release idempotent across retries (``ReleaseLog``), and the renewals over it
    that both backends inherit (``RenewingBackend``);
  * ``redlock.py``: the Redlock ``Backend`` (the registry's ``redlock`` row), on the same nodes, scripts
    and attempts; ``masters.py``: the masters and the way of asking them all at once (majority,
    deadlines, quorum errors).

An acquire's path: ``Lock.acquire`` (``distlock/_async/locks.py``, ``acquirer.py``) -> ``_async/attempt.py``
-> ``Backend`` (``_async/__init__.py``) -> ``node.py`` (the call, encoded by ``calls.py`` with ``keys.py`` and
``lua/``) -> ``wire.py`` -> ``_driver_async.py`` -> the socket.
"""
