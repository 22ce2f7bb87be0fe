# GENERATED from src/distlock/_async/backends/__init__.py by scripts/gen_sync.py: edit that file, not this one.
"""Backends, one module each (see ``backend.py`` for the contract)."""
