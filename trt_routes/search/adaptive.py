"""``adaptive``: trt-routes' own strategy. Screen knobs one at a time (the cheapest builds first), keep only
those whose gain over the baseline exceeds the noise, then search combinations of the positive knobs (all
of them at once first, then coordinate descent), warm-started from routes that won for related jobs.

Pure like every strategy: the whole search is replayed from the outcomes known so far, so it resumes
after a crash and gives the same proposals in ``plan`` and ``apply``. Budgets are enforced outside
(``trt_routes.search.job``), counting only new builds."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping

from trt_routes.catalog import Catalog
from trt_routes.errors import RouteError
from trt_routes.routes import Expression, route_dict
from trt_routes.search.base import Outcome, Search, unique
from trt_routes.search.screening import GroupScreen
from trt_routes.search.strategies import FastSearch, _Routes

#: Coordinate-descent moves at most (a guard; every move strictly lowers the incumbent's median).
MAX_MOVES = 32
#: Re-screenings of the other knobs around the incumbent (each costs one build per value).
SWEEPS = 1
#: Screening routes (baseline, warm and one-knob) from which a budget too small for them screens in groups.
GROUPED_MIN = 16
#: Share of ``max_builds`` the one-knob scan may take (the rest combines and descends): a larger scan screens
#: in groups. Below half, the scan cut at the budget picks a slower route than group screening does
#: (``bench/search_scale.py --curve``).
SCAN_SHARE = 0.5
#: One-knob outcomes needed before the screening reference pools them with the baseline.
POOL_MIN = 12


def relative_noise(outcome: Outcome) -> float:
    """Half the width of the median's confidence interval, relative to the median (0 when unknown)."""
    if outcome.median_ms is None or outcome.median_ms <= 0 or outcome.ci_low is None or outcome.ci_high is None:
        return 0.0
    return max(0.0, (outcome.ci_high - outcome.ci_low) / 2.0 / outcome.median_ms)


def gain(a: Outcome, b: Outcome) -> float | None:
    """How much faster ``a`` is than ``b`` (0.1: 10% less time); None unless both are ok and timed."""
    if not (a.ok and b.ok) or a.median_ms is None or not b.median_ms:
        return None
    return 1.0 - a.median_ms / b.median_ms


def beats_beyond_noise(a: Outcome, b: Outcome, min_gain: float) -> bool:
    """``a`` is faster than ``b`` by more than ``min_gain`` and by more than the two measurements' noise
    (their relative interval half-widths added in quadrature)."""
    g = gain(a, b)
    if g is None:
        return False
    noise = math.hypot(relative_noise(a), relative_noise(b))
    return g > max(min_gain, noise)


class AdaptiveSearch(Search):
    """Noise-aware screening, then a combination search over the positive knobs (see the module doc)."""

    name = "adaptive"
    # every step (screening, the combination, each descent step, each sweep) waits for all the routes it
    # proposed before deciding anything, and what it proposes follows from earlier steps alone
    keeps_proposals = True

    def __init__(self, expr: Expression, catalog: Catalog, warm: Iterable[str] = (), min_gain: float = 0.01,
                 budget: int | None = None, avoid: Iterable[str] = (), minutes: float | None = None) -> None:
        self._routes = _Routes(expr, catalog)
        self.min_gain = min_gain
        self.budget = budget
        self.minutes = minutes
        screen = FastSearch(expr, catalog)
        self.baseline = screen.baseline
        self.varied = {t.option: t for t in self._routes.varied}
        #: option -> [(value, one-knob route)] for every non-default value of every varied knob
        self.one_knob: dict[str, list[tuple[str, str]]] = {}
        for token in self._routes.varied:
            pairs = [(v, self._routes.route({token.option: v})) for v in token.values]
            self.one_knob[token.option] = [(v, r) for v, r in pairs if r != self.baseline]
        self.warm = tuple(unique(r for r in (self.project(w) for w in warm) if r is not None and r != self.baseline))
        #: screening, cheapest builds first (``Catalog.route_cost``; token order among equals), so that a
        #: ``max_minutes`` budget screens as many knobs as it can before the autotuning ones
        #: ``option=value`` of values that failed for related jobs (``trt_routes.search.priors``): screened last
        self.avoid = frozenset(avoid)
        screening = sorted(screen.routes, key=lambda r: (self._avoided(r), catalog.route_cost(route_dict(r))))
        self.phase1 = unique([self.baseline, *self.warm, *screening])
        #: ``max_builds`` cannot pay for the one-knob scan and as many builds again to combine: screen in groups
        #: (and the group is large enough for groups to save builds: small groups keep the one-knob scan)
        self.grouped = budget is not None and len(self.phase1) >= GROUPED_MIN and \
            len(self.phase1) > budget * SCAN_SHARE
        #: ``max_minutes``: how many builds it pays for is known once the baseline is built (``timed_budget``)
        self.timed = minutes is not None and not self.grouped and len(self.phase1) >= GROUPED_MIN
        self._screens: dict[tuple[str, int], GroupScreen] = {}

    def _avoided(self, route: str) -> bool:
        return any(f"{o}={v}" in self.avoid for o, v in route_dict(route).items())

    def project(self, route: str) -> str | None:
        """``route`` restricted to this expression's varied knobs and values (pinned knobs as pinned)."""
        try:
            assign = route_dict(route)
        except RouteError:
            return None
        kept = {k: v for k, v in assign.items() if k in self.varied and v in self.varied[k].values}
        try:
            return self._routes.route(kept)
        except RouteError:
            return None

    def _assign(self, route: str) -> dict[str, str]:
        return {k: v for k, v in route_dict(route).items() if k in self.varied}

    def reference(self, known: Mapping[str, Outcome]) -> Outcome | None:
        """What one-knob routes are screened against: the baseline, or, once ``POOL_MIN`` one-knob routes are
        measured, the lower of the baseline's median and the median of the baseline's and theirs (most knobs
        change nothing, so the pool is the default's time again), so one slow draw of the baseline cannot make
        many knobs "positive". The baseline's relative interval is kept."""
        base = known.get(self.baseline)
        if base is None or not base.ok or base.median_ms is None:
            return base
        medians = [o.median_ms for pairs in self.one_knob.values() for _, r in pairs
                   if (o := known.get(r)) is not None and o.ok and o.median_ms is not None]
        if len(medians) < POOL_MIN:
            return base
        pooled = min(base.median_ms, statistics.median([base.median_ms, *medians]))
        scale = pooled / base.median_ms
        return Outcome(True, pooled, base.ci_low * scale if base.ci_low is not None else None,
                       base.ci_high * scale if base.ci_high is not None else None, base.build_s)

    def positives(self, known: Mapping[str, Outcome]) -> dict[str, list[str]]:
        """Positive knobs (best gain first) -> their positive values (best first). With a failed baseline,
        every value whose one-knob route is ok counts (ranked by median)."""
        base = self.reference(known)
        scored: list[tuple[float, str, list[str]]] = []
        for option, pairs in self.one_knob.items():
            values: list[tuple[float, str]] = []
            for value, route in pairs:
                outcome = known.get(route)
                if outcome is None or not outcome.ok or outcome.median_ms is None:
                    continue
                if base is not None and base.ok:
                    if beats_beyond_noise(outcome, base, self.min_gain):
                        values.append((gain(outcome, base) or 0.0, value))
                else:
                    values.append((-outcome.median_ms, value))
            if values:
                values.sort(key=lambda gv: -gv[0])
                scored.append((values[0][0], option, [v for _, v in values]))
        scored.sort(key=lambda s: -s[0])
        return {option: values for _, option, values in scored}

    def _best(self, routes: Iterable[str], known: Mapping[str, Outcome]) -> str | None:
        ok = [r for r in routes if r in known and known[r].ok and known[r].median_ms is not None]
        if not ok:
            return None
        return min(ok, key=lambda r: (known[r].median_ms, len(r.split()), r))  # type: ignore[return-value]

    def candidates(self, known: Mapping[str, Outcome]) -> list[str]:
        """Screening; the positives combined; coordinate descent over the positives; then re-screening of
        the other knobs around the incumbent (a strong knob can change what the others do: CUDA graphs
        remove launch noise that hid a kernel knob's gain), which adds knobs to the descent."""
        if self.timed and self.baseline not in known:
            return unique([self.baseline, *self.warm])  # its build time says what max_minutes pays for
        budget = self.screen_budget(known)
        if budget is not None:
            return self._grouped(known, budget)
        cands = list(self.phase1)
        if any(r not in known for r in self.phase1):
            return cands
        positives = self.positives(known)
        incumbent = self._best(self.phase1, known)
        if incumbent is None or not positives:
            return cands
        combo = self._routes.route({o: values[0] for o, values in positives.items()})
        cands = unique([*cands, combo])
        if combo not in known:
            return cands
        if self._improves(combo, incumbent, known):
            incumbent = combo
        for sweep_no in range(SWEEPS + 1):
            incumbent, cands, waiting = self._descend(incumbent, positives, known, cands)
            if waiting or sweep_no == SWEEPS:
                return cands
            sweep = {(o, v): r for o in self.varied if o not in positives
                     for v, r in self._moves(incumbent, o)}
            cands = unique([*cands, *sweep.values()])
            if any(r not in known for r in sweep.values()):
                return cands
            found = sorted(((gain(known[r], known[incumbent]) or 0.0, o, v) for (o, v), r in sweep.items()
                            if self._beats(r, incumbent, known, self.min_gain)), reverse=True)
            if not found:
                break
            for _g, o, v in found:
                positives.setdefault(o, []).append(v)
            incumbent = sweep[(found[0][1], found[0][2])]
        return cands

    def _descend(self, incumbent: str, positives: Mapping[str, list[str]], known: Mapping[str, Outcome],
                 cands: list[str]) -> tuple[str, list[str], bool]:
        """Coordinate descent over the positive knobs from ``incumbent``: (incumbent, candidates, waiting
        for measurements)."""
        for _ in range(MAX_MOVES):
            neighbours = self._neighbours(incumbent, positives)
            cands = unique([*cands, *neighbours])
            if any(r not in known for r in neighbours):
                return incumbent, cands, True
            best = self._best(neighbours, known)
            if best is None or not self._improves(best, incumbent, known):
                break
            incumbent = best
        return incumbent, cands, False

    def _moves(self, route: str, option: str) -> list[tuple[str, str]]:
        """(value, route) for every other value of ``option`` on top of ``route``."""
        assign = self._assign(route)
        out = []
        for value in self.varied[option].values:
            moved = self._routes.route({**assign, option: value})
            if moved != route:
                out.append((value, moved))
        return out

    def _beats(self, route: str, incumbent: str, known: Mapping[str, Outcome], min_gain: float) -> bool:
        a, b = known.get(route), known.get(incumbent)
        return a is not None and b is not None and beats_beyond_noise(a, b, min_gain)

    def _improves(self, route: str, incumbent: str, known: Mapping[str, Outcome]) -> bool:
        a, b = known.get(route), known.get(incumbent)
        if a is None or b is None or not a.ok:
            return False
        return True if not b.ok else beats_beyond_noise(a, b, 0.0)

    def _neighbours(self, incumbent: str, positives: Mapping[str, list[str]]) -> list[str]:
        """Routes one positive knob away from ``incumbent``: another positive value, or back to the default
        (except for the strongest knob, the first: undoing the largest gain is not worth a build)."""
        assign = self._assign(incumbent)
        out: list[str] = []
        for i, (option, values) in enumerate(positives.items()):
            for value in [*values, *([None] if i else [])]:
                changed = dict(assign)
                if value is None:
                    changed.pop(option, None)
                else:
                    changed[option] = value
                route = self._routes.route(changed)
                if route != incumbent:
                    out.append(route)
        return unique(out)

    def timed_budget(self, known: Mapping[str, Outcome]) -> int | None:
        """The builds ``max_minutes`` pays for at the baseline's build time (at most ``max_builds``); None
        without ``max_minutes``, before the baseline is built, or when its build time is unknown."""
        outcome = known.get(self.baseline)
        if not self.timed or self.minutes is None or outcome is None or not outcome.build_s:
            return None
        builds = int(self.minutes * 60.0 // outcome.build_s)
        return builds if self.budget is None else min(builds, self.budget)

    def screen_budget(self, known: Mapping[str, Outcome]) -> int | None:
        """The builds group screening runs under, or None when the one-knob scan pays (see ``SCAN_SHARE``)."""
        if self.grouped:
            return self.budget
        builds = self.timed_budget(known)
        return builds if builds is not None and len(self.phase1) > builds * SCAN_SHARE else None

    def _grouped(self, known: Mapping[str, Outcome], budget: int) -> list[str]:
        """Group screening around the centre, the best of the baseline and the warm routes
        (``trt_routes.search.screening``)."""
        start = unique([self.baseline, *self.warm])
        if any(r not in known for r in start):
            return start
        centre = self._best(start, known) or self.baseline
        return self._screen(centre, budget).run(known, start, centre)

    def _screen(self, centre: str, budget: int) -> GroupScreen:
        if (centre, budget) not in self._screens:
            assign = self._assign(centre)
            units = [(t.option, v) for t in self._routes.varied for v in t.values
                     if v != assign.get(t.option, self._default(t.option))]
            self._screens[(centre, budget)] = GroupScreen(
                assign, units, budget, self._routes.route,
                last=lambda u: f"{u[0]}={u[1]}" in self.avoid)  # failed for related jobs: screened last
        return self._screens[(centre, budget)]

    def _default(self, option: str) -> str:
        knob = self._routes.catalog.get(option)
        return knob.default if knob is not None else ""

    def pending(self, known: Mapping[str, Outcome]) -> str | None:
        if self.grouped and self.baseline not in known:
            return "adaptive: group screening waits for the baseline"
        if self.timed and self.baseline not in known:
            return "adaptive: waits for the baseline's build time, which says how many builds max_minutes pays for"
        if self.screen_budget(known) is not None:
            return None
        missing = sum(1 for r in self.phase1 if r not in known)
        if not missing or not any(self.one_knob.values()):
            return None
        plural = "s" if missing != 1 else ""
        return f"adaptive: the combination search waits for {missing} screening measurement{plural}"
