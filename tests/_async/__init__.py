"""Async tests: the source of tests/_sync (scripts/gen_sync.py)."""
