"""The backends, one folder each: ``<name>/__init__.py`` maps its folder (the contract is ``_async/backend.py``).

A backend's folder holds everything that serves only that backend: its pure modules (key layout, scripts,
encoding; no I/O, as in ``_core/``), its modules without async code (imported by both sides), its hand-kept
driver seam pair (``_driver_async.py`` / ``_driver_sync.py``: what differs between the asyncio and the
threaded driver) and its async sources (``_async/``), from which ``scripts/gen_sync.py`` generates ``_sync/``.
The registry (``_registry.py``) names each backend's ``_async`` module. ``sql/`` is no backend: it holds what
MySQL/MariaDB (``mysql/``) and PostgreSQL (``postgres/``) share, laid out the same way.
"""
