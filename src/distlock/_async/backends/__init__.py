"""The SQL backends (MySQL, PostgreSQL, their shared lease tables), not yet in ``_backends/<name>/`` (see
``backend.py`` for the contract)."""
