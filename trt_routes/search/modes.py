"""The one file that names every search mode: mode name -> strategy class, with the checks shared by all.

trtexec's ``fast``, ``full`` and ``mixed`` live in ``strategies``; trt-routes' own ``adaptive`` in ``adaptive``."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable

from trt_routes.catalog import Catalog
from trt_routes.errors import RouteError
from trt_routes.routes import Expression, validate_expression
from trt_routes.search.adaptive import AdaptiveSearch
from trt_routes.search.base import Search
from trt_routes.search.strategies import FastSearch, FullSearch, MixedSearch

MODES = ("adaptive", "fast", "full", "mixed")


_STRATEGIES: dict[str, Callable[[Expression, Catalog], Search]] = {
    "fast": FastSearch,
    "full": FullSearch,
    "mixed": MixedSearch,
}


def make_search(mode: str, expr: Expression, catalog: Catalog, *, warm: tuple[str, ...] = (),
                min_gain: float = 0.01, budget: int | None = None, avoid: tuple[str, ...] = (),
                minutes: float | None = None) -> Search:
    """The strategy for ``mode`` over ``expr``, after checking the expression against the catalog.

    ``warm`` (routes that won for related jobs), ``avoid`` (values that failed for them: screened last),
    ``min_gain``, ``budget`` (``max_builds``: group screening when it cannot pay for a one-knob scan) and
    ``minutes`` (``max_minutes``: the same, with the builds it pays for at the baseline's build time) are used
    by ``adaptive``; ``mixed`` reads only whether either is set (without, a huge phase 2 is left out)."""
    if mode not in MODES:
        close = difflib.get_close_matches(mode, MODES, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        raise RouteError(f"unknown search mode `{mode}`", f"{hint}modes: {', '.join(MODES)}")
    validate_expression(expr, catalog)
    if mode == "adaptive":
        return AdaptiveSearch(expr, catalog, warm, min_gain, budget, avoid, minutes)
    if mode == "mixed":
        return MixedSearch(expr, catalog, bounded=budget is not None or minutes is not None)
    return _STRATEGIES[mode](expr, catalog)


@functools.lru_cache(maxsize=256)
def cached_search(mode: str, expr: Expression, catalog: Catalog, warm: tuple[str, ...] = (),
                  min_gain: float = 0.01, budget: int | None = None, avoid: tuple[str, ...] = (),
                  minutes: float | None = None) -> Search:
    """``make_search`` memoized: strategies are stateless, so jobs sharing a switch group share one."""
    return make_search(mode, expr, catalog, warm=warm, min_gain=min_gain, budget=budget, avoid=avoid,
                       minutes=minutes)


def expand(mode: str, expr: Expression, catalog: Catalog) -> list[str]:
    """Every route a static mode (fast, full) will measure, for ``--dry-run``."""
    if mode in ("mixed", "adaptive"):
        raise RouteError(
            f"search mode `{mode}` cannot be listed ahead of time: what it builds next depends on what "
            "it measured", "use mode `fast` to list the first phase, or `full` to list every combination",
        )
    return make_search(mode, expr, catalog).candidates({})
