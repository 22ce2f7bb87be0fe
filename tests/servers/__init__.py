"""Real server processes for the tests: started from the installed binaries on free 127.0.0.1 ports,
in temporary directories, stopped by PID. One module per server family; ``proc.py`` is the shared part.

Each family module offers a context manager (``redis_server()``, ...) yielding a :class:`ServerProc`
(or a cluster object holding several) whose ``url`` the tests connect to. ``DISTLOCK_TEST_<BACKEND>_URL``
points a test run at an external server instead (see ``tests/conftest.py``).
"""
