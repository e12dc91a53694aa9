"""trtexec's search strategies over a tuning expression: fast, full and mixed; the registry of every
strategy (``adaptive``, trt-routes' own, lives in ``trt_routes.search.adaptive``).

Pinned tokens apply to every route; routes are canonical, so one equal to the default is ``""``."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from trt_routes.catalog import Catalog
from trt_routes.routes import Expression, Token, canonical
from trt_routes.search.base import Outcome, Search, unique


class _Routes:
    """Turns assignments of the varied knobs into canonical routes, pinned knobs included."""

    def __init__(self, expr: Expression, catalog: Catalog) -> None:
        self.catalog = catalog
        self.pinned = expr.pinned
        self.varied = expr.varied

    def route(self, assign: Mapping[str, str]) -> str:
        return canonical({**self.pinned, **assign}, self.catalog)

    def product(self, tokens: Sequence[Token]) -> list[str]:
        """The Cartesian product of the tokens' lists, last token varying fastest."""
        options = [t.option for t in tokens]
        return unique(
            self.route(dict(zip(options, values, strict=True)))
            for values in itertools.product(*(t.values for t in tokens))
        )


class FastSearch(Search):
    """The baseline (varied knobs at their defaults), then one knob changed at a time, in token order."""

    name = "fast"
    static = True
    keeps_proposals = True

    def __init__(self, expr: Expression, catalog: Catalog) -> None:
        routes = _Routes(expr, catalog)
        self.baseline = routes.route({})
        self.one_knob: dict[str, list[str]] = {}
        for token in routes.varied:
            changed = (routes.route({token.option: value}) for value in token.values)
            self.one_knob[token.option] = unique(r for r in changed if r != self.baseline)
        self.routes = unique([self.baseline, *itertools.chain.from_iterable(self.one_knob.values())])

    def candidates(self, known: Mapping[str, Outcome]) -> list[str]:
        return list(self.routes)


class FullSearch(Search):
    """Every combination of the listed values."""

    name = "full"
    static = True
    keeps_proposals = True

    def __init__(self, expr: Expression, catalog: Catalog) -> None:
        routes = _Routes(expr, catalog)
        self.routes = routes.product(routes.varied)

    def candidates(self, known: Mapping[str, Outcome]) -> list[str]:
        return list(self.routes)


class MixedSearch(Search):
    """Fast first; then, if more than one knob beat the baseline, the full product over those knobs."""

    name = "mixed"
    keeps_proposals = True  # phase 2 appears only once phase 1 is complete, and then is static

    def __init__(self, expr: Expression, catalog: Catalog) -> None:
        self._routes = _Routes(expr, catalog)
        self.phase1 = FastSearch(expr, catalog)

    def positives(self, known: Mapping[str, Outcome]) -> list[str]:
        """Knobs (in token order) with a one-knob route strictly faster than the baseline."""
        baseline = known.get(self.phase1.baseline)
        if baseline is None:
            return []
        return [
            option
            for option, routes in self.phase1.one_knob.items()
            if any(r in known and known[r].beats(baseline) for r in routes)
        ]

    def phase2(self, known: Mapping[str, Outcome]) -> list[str]:
        """Phase-2 routes (empty until phase 1 is complete, or with fewer than two positive knobs)."""
        if self._missing(known):
            return []
        positive = set(self.positives(known))
        if len(positive) < 2:
            return []
        return self._routes.product([t for t in self._routes.varied if t.option in positive])

    def candidates(self, known: Mapping[str, Outcome]) -> list[str]:
        return unique([*self.phase1.routes, *self.phase2(known)])

    def pending(self, known: Mapping[str, Outcome]) -> str | None:
        missing = self._missing(known)
        could_qualify = sum(1 for routes in self.phase1.one_knob.values() if routes)
        if not missing or could_qualify < 2:
            return None
        plural = "s" if missing != 1 else ""
        return f"mixed phase 2 waits for {missing} phase-1 measurement{plural}"

    def _missing(self, known: Mapping[str, Outcome]) -> int:
        return sum(1 for r in self.phase1.routes if r not in known)
