# GENERATED from tests/_async/__init__.py by scripts/gen_sync.py: edit that file, not this one.
"""Async tests: the source of tests/_sync (scripts/gen_sync.py)."""
