"""The SQL lock modes shared by MySQL/MariaDB and PostgreSQL, async source of both sides (the folder is mapped
in ``_backends/sql/__init__.py``)."""
