"""The test suite's server harness: the modules of :mod:`distlock._servers` (the same code ``distlock check --spawn``
and ``distlock bench --spawn`` use), re-exported under their old names, plus the test-only helpers
(``mysql.skip_unsupported_kinds``).

Each family module offers a context manager (``redis_server()``, ...) yielding a ``ServerProc`` (or a cluster
object holding several) whose ``url`` the tests connect to. ``DISTLOCK_TEST_<BACKEND>_URL`` points a test run at an
external server instead (see ``tests/conftest.py``).
"""
