"""Group screening for ``adaptive`` when ``max_builds`` cannot pay for a one-knob scan (issue 30).

Units are (knob, value) changes to the centre route (the best of the baseline and the warm-start routes). The
search is written as one sequential procedure that asks for batches of routes (``Ask``); it is replayed from
the outcomes known so far on every call, so it stays pure: ``plan`` and ``apply`` propose the same routes and a
stopped search resumes. Its steps, each one batch that builds side by side:

1. **Screen** every unit once, several per build, on top of the incumbent (at first the centre): the first
   level's groups take ``FIRST_LEVEL`` of the budget. A group that fails (crash, build error, accuracy gate)
   or is ``SLOW`` slower is split in two (a gain may hide beside a failing or slow value); a group that fails
   the accuracy gate still has a time (an engine was built and run), and when it is faster its halves go
   first. Groups faster than the reference by ``GAIN`` are added to the incumbent together (each whole),
   checked by one build. When the sum fails or is no faster than the best of them (values that fail only
   together, a knob that cancels another's gain), the faster half of the groups is tried together, then its
   faster half, down to the best group alone; the groups left out are screened again on top of the
   incumbent. The reference is the incumbent's time, or the median of the batch when lower (most groups
   change nothing, so one slow draw of the incumbent cannot make them "faster").
2. **Screen again on the incumbent** (from ``SCREEN_SHARE`` of the budget): the units that were neutral, in
   groups of ``SECOND_SIZE`` (they built successfully before, so these groups rarely fail), as many as the
   budget pays for: a knob that helps only beside a gain found in step 1 shows now. The groups are
   interleaved (``interleave``): a gain masked by a loss in its first group meets other units. After them come
   the groups step 1 left unscreened when its share ran out (the halves of failed groups), and last the other
   values of knobs the incumbent moved, each in place of the value taken (a level knob's ``extended`` that
   helps only beside float16, when its ``disabled`` came in with a faster group: BERT on the H200).
3. **Drop passengers** (the last ``DROP_SHARE`` of the budget): for each group taken whole, the incumbent
   without one half, then without the other; a half whose removal costs nothing is dropped, a half whose
   removal costs is split again. The drops of one step are checked together by one build.

Builds a step cannot use go to the groups still waiting: the search ends at its budget, not before.
``bench/search_scale.py`` measures it; ``docs/search-at-scale.md`` says what holds at which scale."""

from __future__ import annotations

__all__ = ["Ask", "GroupScreen", "Unit", "interleave", "split_by_knob"]

import contextlib
import math
import statistics
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from trt_routes.search.base import Outcome, unique

#: Share of the budget the first level of groups takes.
FIRST_LEVEL = 0.6
#: Share of the budget after which the neutral units are screened again on the incumbent.
SCREEN_SHARE = 0.7
#: The last share of the budget, kept to drop the passengers of groups taken whole.
DROP_SHARE = 0.15
#: Group size when screening again (every unit in it built successfully before).
SECOND_SIZE = 12
#: Builds per unit beyond which a budget is left unused: with more, first-level groups would hold one unit
#: each (a scan) and the later steps do not pay for the rest (``bench/search_scale.py --curve``).
MAX_PER_UNIT = 1.25
#: A group faster than the reference by this (log of the time ratio) is added to the incumbent.
GAIN = 0.02
#: A group this much slower (log) is split: a gain may hide behind a loss.
SLOW = 0.05

Unit = tuple[str, str]


class _Waiting(Exception):
    """A batch holds routes not measured yet: the replay stops here."""


class Ask:
    """Answers a replayed procedure's batches from the outcomes known so far, recording every route asked."""

    def __init__(self, known: Mapping[str, Outcome], spent: Iterable[str]) -> None:
        self.known = known
        self.proposed: list[str] = []
        self._spent = set(spent)

    @property
    def used(self) -> int:
        """Builds asked for so far (the start routes included)."""
        return len(self._spent)

    def __call__(self, routes: Sequence[str]) -> list[Outcome]:
        self.proposed.extend(routes)
        self._spent.update(routes)
        if any(r not in self.known for r in routes):
            raise _Waiting
        return [self.known[r] for r in routes]


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


def interleave(units: Sequence[Unit], size: int) -> list[Unit]:
    """``units`` reordered so that consecutive groups of ``size`` take every n-th unit: units that shared a group
    before now meet others (a gain hidden beside a loss in its first group shows in its second)."""
    n = max(1, math.ceil(len(units) / size))
    return [u for start in range(n) for u in units[start::n]]


def _halves(group: list[Unit]) -> list[list[Unit]]:
    return [group[: len(group) // 2], group[len(group) // 2:]]


def _ok(outcome: Outcome | None) -> bool:
    return outcome is not None and outcome.ok and outcome.median_ms is not None and outcome.median_ms > 0


class GroupScreen:
    """The procedure above over ``units`` (changes to ``centre``), within ``budget`` builds. ``route_of`` turns
    an assignment into a route (a knob it leaves out is at its default); ``last`` marks units screened after
    all others (values that failed for related jobs)."""

    def __init__(self, centre: Mapping[str, str], units: Sequence[Unit], budget: int,
                 route_of: Callable[[Mapping[str, str]], str], last: Callable[[Unit], bool] = lambda u: False) -> None:
        self.centre = dict(centre)
        self.budget = min(budget, math.ceil(len(units) * MAX_PER_UNIT))
        self.route_of = route_of
        # every knob's first value before its second: groups mix knobs, not values; ``last`` units after all
        seen: Counter[str] = Counter()
        rank = {}
        for unit in units:
            rank[unit] = seen[unit[0]]
            seen[unit[0]] += 1
        self.units = sorted(units, key=lambda u: (last(u), rank[u]))
        first = [u for u in self.units if not last(u)]
        self.size = max(1, math.ceil(len(self.units) / max(1, min(len(self.units), int(self.budget * FIRST_LEVEL)))))
        self.first = split_by_knob(first, self.size) + split_by_knob(self.units[len(first):], self.size)

    def run(self, known: Mapping[str, Outcome], start: Sequence[str], centre_route: str) -> list[str]:
        """Every route proposed so far (``start`` first), the next batch's included."""
        ask = Ask(known, start)
        with contextlib.suppress(_Waiting):  # the batch asked last waits for its measurements
            _Run(self, ask, known[centre_route]).run()
        return unique([*start, *ask.proposed])


class _Run:
    """One replay of the procedure: the incumbent and what is known of each unit."""

    def __init__(self, screen: GroupScreen, ask: Ask, centre: Outcome) -> None:
        self.s = screen
        self.ask = ask
        self.inc = dict(screen.centre)
        self.inc_out = centre
        self.taken: list[tuple[float, list[Unit]]] = []  # (gain, group) added to the incumbent, in order
        self.neutral: list[Unit] = []  # units in successful groups that changed nothing

    def route(self, group: Sequence[Unit] = ()) -> str:
        return self.s.route_of({**self.inc, **dict(group)})

    def moved(self) -> set[str]:
        """Knobs the incumbent sets differently from the centre."""
        return {o for o in {*self.inc, *self.s.centre} if self.inc.get(o) != self.s.centre.get(o)}

    def new(self, units: Iterable[Unit]) -> list[Unit]:
        """``units`` the incumbent does not hold (a value of a knob it moved replaces the value taken)."""
        return [u for u in units if self.inc.get(u[0]) != u[1]]

    def run(self) -> None:
        budget = self.s.budget
        limit = budget - math.floor(budget * DROP_SHARE)
        first = deque(self.s.first)
        self.screen(first, min(limit, math.floor(budget * SCREEN_SHARE)))
        moved, neutral = self.moved(), set(self.neutral)
        again = [u for u in self.s.units if u in neutral and u[0] not in moved]  # in screening order
        # after them, what the first step left unscreened (many failed groups' halves, a failed centre), then
        # the other values of moved knobs, in place of the value taken
        replacing = [u for u in self.s.units if u in neutral and u[0] in moved]
        queue = deque([*split_by_knob(interleave(again, SECOND_SIZE), SECOND_SIZE), *first,
                       *split_by_knob(replacing, SECOND_SIZE)])
        self.screen(queue, limit)
        self.drop_passengers()
        self.screen(queue, budget)  # what the earlier steps left of the budget

    def reference(self, outcomes: Sequence[Outcome]) -> float | None:
        times = [o.median_ms for o in outcomes if _ok(o) and o.median_ms is not None]
        ref = self.inc_out.median_ms if _ok(self.inc_out) else None
        if ref is None:
            return statistics.median(times) if times else None
        return min(ref, statistics.median([ref, *times])) if len(times) >= 4 else ref

    def screen(self, queue: deque[list[Unit]], cap: int) -> None:
        while queue and self.ask.used < cap:
            batch: list[list[Unit]] = []
            while queue and self.ask.used + len(batch) < cap:
                group = self.new(queue.popleft())
                if group:
                    batch.append(group)
            if not batch:
                return
            outcomes = self.ask([self.route(g) for g in batch])
            ref = self.reference(outcomes)
            faster: list[tuple[float, list[Unit]]] = []
            split: list[list[Unit]] = []
            first: list[list[Unit]] = []  # failed the gate yet faster: a gain beside the failing value
            for group, outcome in zip(batch, outcomes, strict=True):
                ms = outcome.median_ms  # a group that failed the gate was timed too
                gain = math.log(ref / ms) if ref and ms and ms > 0 else None  # no time, or none to divide by
                if not _ok(outcome):
                    if len(group) > 1:
                        (first if gain is not None and gain > GAIN else split).extend(_halves(group))
                elif gain is None:  # no reference time yet: nothing to compare with
                    continue
                elif gain > GAIN:
                    faster.append((gain, group))
                elif gain < -SLOW and len(group) > 1:
                    split.extend(_halves(group))
                else:
                    self.neutral.extend(group)
            queue.extendleft(reversed(first))
            queue.extend([*self.take(faster), *split])

    def take(self, faster: list[tuple[float, list[Unit]]]) -> list[list[Unit]]:
        """Add the faster groups to the incumbent; returns the groups to screen again on the new one."""
        if not faster:
            return []
        faster.sort(key=lambda gg: -gg[0])
        best = faster[0][1]
        single = self.ask.known[self.route(best)]
        count = len(faster)
        while count > 1 and self.ask.used < self.s.budget:
            together = dict(self.inc)
            for _, group in reversed(faster[:count]):  # the fastest group's value wins a knob two groups change
                together.update(group)
            (outcome,) = self.ask([self.s.route_of(together)])
            if _ok(outcome) and outcome.median_ms < single.median_ms:  # type: ignore[operator]
                self.inc, self.inc_out = together, outcome
                self.taken.extend(faster[:count])
                return [g for _, g in faster[count:]]
            count //= 2  # a value that cancels another's gain, or values that fail only together
        self.inc, self.inc_out = {**self.inc, **dict(best)}, single
        self.taken.append(faster[0])
        return [g for _, g in faster[1:]]

    def drop_passengers(self) -> None:
        """Halving by removal: for each group taken whole, the incumbent without its first half, and without
        its second. A half whose removal costs nothing (``GAIN / 2`` at most) holds no gain and is dropped (the
        cheaper one when both cost nothing); a half whose removal costs is split again while the budget lasts.
        The drops of one step are checked together by one build (else the best single drop is kept)."""
        work = deque(g for _, g in self.taken if len(g) > 1)
        while work and self.ask.used + 3 <= self.s.budget and _ok(self.inc_out):
            batch: list[list[Unit]] = []
            while work and self.ask.used + 2 * len(batch) + 3 <= self.s.budget:
                group = [u for u in work.popleft() if self.inc.get(u[0]) == u[1]]
                if len(group) > 1:
                    batch.append(group)
            if not batch:
                return
            halves = [half for group in batch for half in _halves(group)]
            outcomes = self.ask([self.s.route_of(self.without(half)) for half in halves])
            free = self.inc_out.median_ms * (1 + GAIN / 2)  # type: ignore[operator]
            drops: list[tuple[float, list[Unit]]] = []  # (the incumbent's time without the half, the half)
            for i in range(0, len(halves), 2):  # each group's two halves
                timed = [(o.median_ms, half) for half, o in zip(halves[i:i + 2], outcomes[i:i + 2], strict=True)
                         if _ok(o) and o.median_ms is not None]
                cheap = min((t for t in timed if t[0] < free), default=None, key=lambda t: t[0])
                if cheap is not None:
                    drops.append(cheap)
                work.extend(half for _, half in timed if len(half) > 1 and (cheap is None or half is not cheap[1]))
            if not drops:
                continue
            drops.sort(key=lambda d: d[0])
            if len(drops) > 1:
                together = self.without([u for _, half in drops for u in half])
                (outcome,) = self.ask([self.s.route_of(together)])
                if _ok(outcome) and outcome.median_ms < free:  # type: ignore[operator]
                    self.inc, self.inc_out = together, outcome
                    continue
            self.inc = self.without(drops[0][1])  # the best single drop
            self.inc_out = self.ask.known[self.s.route_of(self.inc)]

    def without(self, part: Sequence[Unit]) -> dict[str, str]:
        """The incumbent with ``part``'s knobs back at the centre's values (or their defaults)."""
        assign = dict(self.inc)
        for option, _ in part:
            if option in self.s.centre:
                assign[option] = self.s.centre[option]
            else:
                assign.pop(option, None)
        return assign
