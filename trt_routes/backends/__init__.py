"""Backends: one small contract (base.py) and a registry of lazily imported plugins."""
