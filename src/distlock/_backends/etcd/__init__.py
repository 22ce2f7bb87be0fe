"""etcd v3 (``etcd://h1:2379,h2:2379``, ``etcds://`` for TLS): the layout of etcd's Go ``concurrency.Mutex``,
over the JSON gateway. Driver: h11 (HTTP/1.1 framing); the rest is distlock's own.

The folder splits as etcd's own client does, from the socket up:

* the pure modules (no I/O): ``keys.py`` the key layout and the parse of a range read into a name's queue
  (it also re-exports the names of the four below, which it once held); ``records.py`` what a contender's key
  holds (owner record, election value, release request); ``semaphore.py`` a semaphore's terms in those
  records; ``rule.py`` the grant rule; ``ops.py`` the JSON gateway's request bodies (ranges, compares, puts);
* ``guard.py``: ``EtcdGuard``, the ownership condition for your own transactions (Go's
  ``Mutex.IsOwner()``; no I/O, one class for both sides);
* ``_driver_async.py`` / ``_driver_sync.py``: the hand-kept driver seam pair, a connection's open, send,
  receive and close (asyncio streams, a blocking socket);
* ``_async/``: the backend, written once (``_sync/`` is generated from it by ``scripts/gen_sync.py``):

  * ``http.py``: a small HTTP/1.1 client over h11 (kept-alive connections per member, deadlines);
  * ``gateway.py``: the JSON gateway: opening a store, failover across members, auth, the key-value calls,
    error mapping (Go's client connection);
  * ``leases.py``: every lease's lifecycle: grant, the pool of free leases, keepalive, revoke, its local end
    (Go's ``concurrency.Session``);
  * ``mutex.py``: one acquisition: the queue of keys, the grant, the wait for the predecessor, the clean-up
    (Go's ``concurrency.Mutex``);
  * ``moves.py``: a held key's move onto another lease, its create revision kept (``extend`` past the
    lease's TTL, ``shorten``, a downgraded write's key kept under its read's lease);
  * ``admin.py``: what ``inspect`` / ``list`` / ``break_lock`` read of everyone's keys;
  * ``waits.py``: the waiters' shared watch: one stream per store and name, whatever the number of waiters;
  * ``watch.py``: an election observer's watch on ``NAME/`` (``store.observe``), and ``list --watch``'s on
    a prefix;
  * ``latch.py`` / ``barrier.py``: latches and barriers, one key each outside every lock's range, stepped by
    compare-and-set transactions (a latch's waiters on a watch of its key);
  * ``__init__.py``: ``Backend``, the store's view of its holdings, and ``guard()``.
"""
