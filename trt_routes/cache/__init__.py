"""The trial cache: every measured trial, keyed by signature, job parts and route."""

from trt_routes.cache.store import CacheStore, TrialRecord

__all__ = ["CacheStore", "TrialRecord"]
