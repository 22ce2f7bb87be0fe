# GENERATED from src/distlock/_backends/sql/_async/__init__.py by scripts/gen_sync.py: edit that file, not this one.
"""The SQL lock modes shared by MySQL/MariaDB and PostgreSQL, async source of both sides (the folder is mapped
in ``_backends/sql/__init__.py``)."""
