"""trtexec's search strategies over a tuning expression: fast, full and mixed; the registry of every
strategy (``adaptive``, trt-routes' own, lives in ``trt_routes.search.adaptive``).

Pinned tokens apply to every route; routes are canonical, so one equal to the default is ``""``.

A product of more than ``LIST_LIMIT`` routes (``full`` over a large group, ``mixed``'s phase 2 over many positive
knobs) is never materialized: it is walked lazily in its fixed order, and ``candidates`` lists the routes
measured so far plus the next ``CHUNK`` unmeasured ones, so a budget cuts it before it is built and
``plan`` answers at once whatever the group's size."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence

from trt_routes.catalog import Catalog
from trt_routes.routes import UNBOUNDED_LIMIT, Expression, Token, canonical, count_text, product_size
from trt_routes.search.base import Outcome, Search, unique

#: Products up to this many routes are listed whole (and the strategy is static); larger ones lazily.
LIST_LIMIT = 20_000
#: Unmeasured routes of a lazily walked product listed at a time.
CHUNK = 1024


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
        return unique(self.iter_product(tokens))

    def iter_product(self, tokens: Sequence[Token]) -> Iterator[str]:
        """``product`` as a generator (duplicates not merged)."""
        options = [t.option for t in tokens]
        for values in itertools.product(*(t.values for t in tokens)):
            yield self.route(dict(zip(options, values, strict=True)))

    def lazy_product(self, tokens: Sequence[Token], known: Mapping[str, Outcome], chunk: int = CHUNK) -> list[str]:
        """The product's routes in order up to the ``chunk``-th one not in ``known``."""
        out: dict[str, None] = {}
        unknown = 0
        for route in self.iter_product(tokens):
            if route in out:
                continue
            out[route] = None
            if route not in known:
                unknown += 1
                if unknown >= chunk:
                    break
        return list(out)


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
    """Every combination of the listed values (walked lazily beyond ``LIST_LIMIT`` routes: not static then)."""

    name = "full"
    static = True
    keeps_proposals = True

    def __init__(self, expr: Expression, catalog: Catalog) -> None:
        self._routes = _Routes(expr, catalog)
        self.size = product_size(self._routes.varied)
        self.static = self.size <= LIST_LIMIT
        self.routes = self._routes.product(self._routes.varied) if self.static else []

    def candidates(self, known: Mapping[str, Outcome]) -> list[str]:
        if self.static:
            return list(self.routes)
        return self._routes.lazy_product(self._routes.varied, known)


class MixedSearch(Search):
    """Fast first; then, if more than one knob beat the baseline, the full product over those knobs."""

    name = "mixed"
    keeps_proposals = True  # phase 2 appears only once phase 1 is complete, and then is static

    def __init__(self, expr: Expression, catalog: Catalog, bounded: bool = False) -> None:
        self._routes = _Routes(expr, catalog)
        self.phase1 = FastSearch(expr, catalog)
        #: a budget (max_builds or max_minutes) ends phase 2; without one, a product past ``UNBOUNDED_LIMIT``
        #: is left out (``note``): walking 10^40 routes never ends
        self.bounded = bounded

    def _phase2_tokens(self, known: Mapping[str, Outcome]) -> list[Token]:
        if self._missing(known):
            return []
        positive = set(self.positives(known))
        return [t for t in self._routes.varied if t.option in positive] if len(positive) >= 2 else []

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
        """Phase-2 routes (empty until phase 1 is complete, or with fewer than two positive knobs); a
        product of more than ``LIST_LIMIT`` routes is walked lazily (``_Routes.lazy_product``)."""
        tokens = self._phase2_tokens(known)
        size = product_size(tokens) if tokens else 0
        if size <= LIST_LIMIT:
            return self._routes.product(tokens) if tokens else []
        if size > UNBOUNDED_LIMIT and not self.bounded:
            return []
        return self._routes.lazy_product(tokens, known)

    def note(self, known: Mapping[str, Outcome]) -> str | None:
        tokens = self._phase2_tokens(known)
        if self.bounded or not tokens or (size := product_size(tokens)) <= UNBOUNDED_LIMIT:
            return None
        return (f"Phase 2 of mode mixed was left out: the {len(tokens)} knobs that beat the baseline make "
                f"{count_text(size)} routes, more than {UNBOUNDED_LIMIT:,} (it would never end); set max_builds to "
                "walk part of it in trtexec's order, or use mode adaptive")

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
