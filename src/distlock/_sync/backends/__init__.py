# GENERATED from src/distlock/_async/backends/__init__.py by scripts/gen_sync.py: edit that file, not this one.
"""The SQL backends (MySQL, PostgreSQL, their shared lease tables), not yet in ``_backends/<name>/`` (see
``backend.py`` for the contract)."""
