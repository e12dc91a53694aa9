"""Search strategies: which routes to measure next, given the outcomes already known.

trtexec-compatible ``fast``, ``full`` and ``mixed`` (``strategies``), trt-routes' ``adaptive`` (``adaptive``);
``modes`` names every one of them."""

from trt_routes.search.base import Outcome, Search
from trt_routes.search.modes import MODES, cached_search, expand, make_search
from trt_routes.search.strategies import FastSearch, FullSearch, MixedSearch

__all__ = [
    "MODES", "FastSearch", "FullSearch", "MixedSearch", "Outcome", "Search", "cached_search", "expand", "make_search",
]
