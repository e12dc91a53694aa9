"""Group screening for ``adaptive`` when ``max_builds`` cannot pay for a one-knob scan (issue 30).

Units are (knob, value) changes to the centre route (the best of the baseline and the warm-start routes).
They are screened in groups, several units per build, sized so that the first level takes 60% of the budget;
a group that fails (crash, build error, accuracy gate) or is much slower than the centre is split in two first
(its halves are screened cleanly), then a group faster than the centre beyond the noise (bisection, as in
sequential bifurcation); a unit alone that is faster is positive, and a faster group the budget cannot split
is combined whole. A fifth of the budget is kept for combining the positives and a descent over them
(``AdaptiveSearch``). Every round's routes are proposed together, so they can build side by side.

Pure: the whole tree is replayed from the outcomes known so far."""

from __future__ import annotations

__all__ = ["GroupScreen", "Unit"]

import math
from collections.abc import Callable, Mapping, Sequence

from trt_routes.search.base import Outcome

#: A group this much slower than the centre is split (a gain may hide behind a loss).
SLOW_SPLIT = 0.05
#: Share of the budget kept for combining and the descent.
RESERVE = 0.2
#: Share of the budget the first level of groups may take.
FIRST_LEVEL = 0.6

Unit = tuple[str, str]


def group_count(units: int, budget: int) -> int:
    """How many first-level groups a budget of ``budget`` builds pays for."""
    return max(1, min(units, math.floor(budget * FIRST_LEVEL)))


def split_by_knob(units: Sequence[Unit], size: int) -> list[list[Unit]]:
    """Consecutive groups of about ``size`` units, never two values of one knob in a group."""
    groups: list[list[Unit]] = []
    current: list[Unit] = []
    for unit in units:
        if len(current) >= size or any(o == unit[0] for o, _ in current):
            groups.append(current)
            current = []
        current.append(unit)
    if current:
        groups.append(current)
    return groups


class GroupScreen:
    """Bisecting group screening of ``units`` on top of a centre route, within ``budget`` builds."""

    def __init__(self, units: Sequence[Unit], budget: int, route_of: Callable[[Sequence[Unit]], str],
                 beats: Callable[[Outcome, Outcome], bool], last: Callable[[Unit], bool] = lambda u: False) -> None:
        self.units = list(units)
        self.budget = budget
        self.route_of = route_of
        self.beats = beats
        # units ordered by value (every knob's first non-default value first): groups mix knobs, not values;
        # units ``last`` says fail elsewhere come after all others, in groups of their own
        order = sorted(range(len(self.units)), key=lambda i: (last(self.units[i]), self._value_rank(self.units[i]), i))
        ordered = [self.units[i] for i in order]
        size = max(1, math.ceil(len(ordered) / group_count(len(ordered), budget)))
        first = [u for u in ordered if not last(u)]
        self.first = split_by_knob(first, size) + split_by_knob(ordered[len(first):], size)

    def _value_rank(self, unit: Unit) -> int:
        return sum(1 for o, _ in self.units[: self.units.index(unit)] if o == unit[0])

    def run(self, centre: Outcome, known: Mapping[str, Outcome], spent: int) -> tuple[
            list[str], list[list[Unit]], bool]:
        """(routes proposed, positive blocks best first, waiting for measurements). A block is one unit, or a
        faster group the budget left no builds to split. ``spent``: builds the search used before screening
        (the centre's and the warm routes')."""
        proposed: list[str] = []
        positives: list[tuple[float, list[Unit]]] = []
        frontier = [g for g in self.first if g]
        limit = max(0, math.floor(self.budget * (1 - RESERVE)) - spent)
        used = 0
        while frontier:
            routes = [self.route_of(g) for g in frontier]
            proposed.extend(routes)
            if any(r not in known for r in routes):
                return proposed, [u for _, u in sorted(positives, key=lambda p: -p[0])], True
            used += sum(1 for r in dict.fromkeys(routes))
            faster: list[tuple[float, list[Unit]]] = []
            other: list[tuple[float, list[Unit]]] = []
            for group, route in zip(frontier, routes, strict=True):
                outcome = known[route]
                g = _gain(outcome, centre)
                if outcome.ok and g is not None and self.beats(outcome, centre):
                    if len(group) == 1:
                        positives.append((g, group))
                    else:
                        faster.append((g, group))
                elif len(group) > 1 and (not outcome.ok or (g is not None and g < -SLOW_SPLIT)):
                    other.append((-(g or -1.0), group))  # failures and the slowest last
            nxt: list[list[Unit]] = []
            # failed and much slower groups are split first: their halves are units not screened cleanly yet;
            # a faster group left whole is combined whole (its gain is kept, its slower units too)
            ranked = [(False, g, grp) for g, grp in sorted(other, key=lambda p: p[0])] + \
                [(True, g, grp) for g, grp in sorted(faster, key=lambda p: -p[0])]
            for is_faster, g, group in ranked:
                if used + len(nxt) + 2 > limit:
                    if is_faster:
                        positives.append((g, group))  # no builds left to split it: combined whole
                    continue
                nxt.extend([group[: len(group) // 2], group[len(group) // 2:]])
            frontier = nxt
        return proposed, [u for _, u in sorted(positives, key=lambda p: -p[0])], False


def _gain(a: Outcome, b: Outcome) -> float | None:
    if not (a.ok and b.ok) or a.median_ms is None or not b.median_ms:
        return None
    return 1.0 - a.median_ms / b.median_ms
