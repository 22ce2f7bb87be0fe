"""The test suite's server harness, and the servers ``distlock check --spawn`` / ``distlock bench --spawn`` start
when run from a checkout of the repository (``spawn.py``; the installed package ships none of this).

Real server processes on loopback, started from the installed binaries: every server binds 127.0.0.1 on a
kernel-chosen free port (the etcd and ZooKeeper partition helpers add one private veth link that exists only on
this host), keeps its data in a temporary directory and is stopped by PID. One module per server family;
``proc.py`` is the shared part. Each family module offers a context manager (``redis_server()``, ...) yielding a
:class:`~tools.servers.proc.ServerProc` (or a cluster object holding several) whose ``url`` a client connects
to. Errors are ``RuntimeError`` with the tail of the server's log. ``DISTLOCK_TEST_<BACKEND>_URL`` points a test
run at an external server instead (see ``tests/conftest.py``).
"""
