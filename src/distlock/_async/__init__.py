"""Asyncio implementation: the single source of truth; ``_sync`` is generated from it."""
