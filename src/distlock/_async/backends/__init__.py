"""Backends, one module each (see ``backend.py`` for the contract)."""
