"""``distlock check``: a Jepsen-style safety checker any user can point at a backend.

Layout (one concept per module):

* ``resource`` -- the two shared resources the workers update under the lock: an unfenced set (a file that
  loses updates when two holders overlap) and a fenced register (an SQLite file that rejects fences lower than
  the highest it has seen). Neither is protected by anything but the lock under test.
* ``sinks`` -- the data sinks of ``--sink`` (SQL, a Redis key, a file) and their writers (unfenced, fenced with
  the ``fencing`` helpers, scoped by the local lease): each resource logs the accesses it accepted, in order.
* ``writers`` -- how each holding of a worker accesses every sink, once per writer, and what each access came to.
* ``broken`` -- known-broken locks (the seed documents' wrong examples) that the checker must catch.
* ``worker`` -- the worker process loop; ``adapters`` the library's own lock as it drives it (sync and async API).
* ``primitives`` -- the barrier and latch workloads (``--algorithm barrier`` / ``latch``), worker side.
* ``semaphore`` -- the weighted semaphore workload (``--algorithm semaphore``), its resize fault and its analysis.
* ``history`` -- pure analysis of the recorded history: overlaps, fences, told late, liveness, verdicts.
* ``sink_analysis`` -- pure analysis of a ``--sink`` run: stale writes per sink and writer, at_risk before lost.
* ``primitive_analysis`` -- pure analysis of a barrier or latch run: waits released early, counts reported twice.
* ``config`` -- what a check runs (``CheckConfig``), its validation, the lease it implies.
* ``runner`` -- one check: starts the workers, hands them to the injector, stops them, builds the report.
* ``injector`` -- the faults (kill -9, SIGSTOP past the TTL, server and gray link faults) and their timing.
* ``collect`` -- the workers' report pipes, the tally of what they reported, the ``--history`` file.
* ``servers`` -- servers the checker starts itself (``--spawn``), on loopback only.
* ``gray`` -- per-worker loopback proxies (``proxy``) and the URL rewriting behind the gray link faults.
"""

from __future__ import annotations
