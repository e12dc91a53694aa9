"""Search strategies: which routes to measure next, given the outcomes already known.

trtexec-compatible ``fast``, ``full`` and ``mixed``; see ``strategies`` for their rules."""

from trt_routes.search.base import Outcome, Search
from trt_routes.search.strategies import (
    MODES,
    FastSearch,
    FullSearch,
    MixedSearch,
    cached_search,
    expand,
    make_search,
)

__all__ = [
    "MODES", "FastSearch", "FullSearch", "MixedSearch", "Outcome", "Search", "cached_search", "expand", "make_search",
]
