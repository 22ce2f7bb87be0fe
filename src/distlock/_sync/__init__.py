# GENERATED from src/distlock/_async/__init__.py by scripts/gen_sync.py: edit that file, not this one.
"""Asyncio implementation: the single source of truth; ``_sync`` is generated from it."""
