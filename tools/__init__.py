"""The development tree's tools, outside the library and outside the tests.

``tools/servers/`` starts throwaway redis-server, ZooKeeper, etcd, MariaDB and PostgreSQL processes on free
loopback ports and stops them by PID: the test suite, ``distlock check --spawn`` / ``distlock bench --spawn``
run from a checkout, and the peer benchmarks in ``benchmarks/`` all use it. Nothing here ships in the wheel.
"""
