"""ZooKeeper (``zookeeper://``, ``zk://``): Curator-compatible locks on a ZooKeeper ensemble. Driver: kazoo.

kazoo is a blocking client (its own threads read the socket and deliver watches), so most of the backend has no
async code: those modules live once, here, and both sides import them; the async side runs their blocking
steps in a worker thread (``rt.offload``). The folder, from the lock down to the wire:

* ``_async/``: what differs between the sides, written once (``_sync/`` is generated from it by
  ``scripts/gen_sync.py``):

  * ``__init__.py``: ``Backend``, which composes the modules below and answers the backend contract;
  * ``recipe.py``: ``Attempt``, one try of Curator's lock recipe (mutex, read/write, semaphore) and its waits;
  * ``watch.py``: an election observer's watch: the children and the leader's data;
  * ``dbarrier.py``: the double barrier (Curator's ``DistributedDoubleBarrier``): enter and leave, polled;

* ``cleanup.py``: what a failed attempt leaves, deleted now or once the session answers again;
* ``admin.py``: ``inspect`` / ``list`` / ``break_lock``: read and break locks from their nodes;
* ``holdings.py``: the holdings of the store, their deletion watches, loss; ``release`` / ``holds`` /
  ``proclaim``;
* ``semaphore.py``: a semaphore's stored capacity (Curator's ``SharedCount``) and weighted leases: the state,
  the all-or-nothing multi, the sweep of a free name, ``set_permits``;
* ``latch.py`` / ``barrier.py``: latches and barriers, one znode each outside every lock's tree (a double
  barrier's nodes are Curator's);
* ``nodes.py``: node operations: protected create, watch, containers, delete;
* ``session.py``: liveness from the last answer (``lease_end``, heartbeat thread) and kazoo's connection
  states;
* ``connect.py``: URL options, a new kazoo client or the caller's;
* ``wire.py``: every request: time-stamped, bounded, errors translated;
* ``handler.py``: the kazoo handler of the clients distlock opens (a cheaper ``select``, waiters woken on the
  event thread);
* ``layout.py``: Curator's node names and order, and the grant rule (pure; it also re-exports the names of
  ``records.py``, which it once held);
* ``records.py``: what the nodes hold: owner records, a semaphore's capacity, release requests (pure).
"""
