"""Real server processes on loopback, started from the installed binaries: the one implementation behind
``distlock check --spawn`` / ``distlock bench --spawn`` (:mod:`distlock.checker.servers`) and the test suite's
harness (``tests/servers/`` re-exports these modules).

Every server binds 127.0.0.1 on a kernel-chosen free port (the etcd partition helper adds one private veth link
that exists only on this host), keeps its data in a temporary directory and is stopped by PID. One module per
server family; ``proc.py`` is the shared part. Each family module offers a context manager (``redis_server()``,
...) yielding a :class:`~distlock._servers.proc.ServerProc` (or a cluster object holding several) whose ``url``
a client connects to. Errors are ``RuntimeError`` with the tail of the server's log.
"""
