"""Confirmation: a winner must beat the job's baseline side by side, beyond noise (the baseline is the
default route unless the manifest names one: ``baseline:``, a route or a backend preset).

After the search, the best few eligible routes are re-measured interleaved with a baseline (the default
route, or the job's locked winner) in one worker: C1 B C2, C3 B C1, ... (``run_sequential``). Each challenger
slot is paired with the baseline slot next to it, which cancels drift; the median of those paired time ratios, with
a distribution-free interval, decides. Pure: re-measurements are data (``Remeasurement``); ``resolve`` asks for the
ones it lacks through a lookup and returns the requests, so plan, apply and explain agree.

**Sequential design** (``Stopping``; the worker runs it as it measures, ``decide`` replays it on the stored
slots, so both reach the same verdict from the same ratios). A group-sequential sign test with a
Bonferroni (union-bound) error spending over the looks, chosen because the fixed design it replaces is an
order-statistic sign test: its levels are exact binomial tails, distribution-free, and the union bound needs no
assumption about how the looks correlate. A confidence sequence (e.g. a betting or a mixture boundary) would
need a bounded or sub-Gaussian ratio, which a launch-bound route's slow sessions are not.

- After every round each undecided challenger is looked at. Its final look (``rounds`` ratios) keeps the very
  boundary of the fixed design (the order statistic the fixed interval used), so nothing is lost at the end.
- The sign test is discrete: the final look spends less than its share of the error (``(1 - confidence) / 2``
  per challenger, Bonferroni over challengers). Interim looks may spend what is left up to ``ERROR_CAP`` of
  that share, earliest first, each taking the largest binomial level that fits (15 rounds, three challengers:
  all 10 ratios below 1 at round 10, all 12 at 12, ...), so a route that clearly wins stops early *for*; where
  the final look already spends more (one challenger), there are no interim looks. By the union bound the
  error stays under the larger of ``ERROR_CAP`` times the nominal level and the fixed design's own.
- A challenger stops *against* as soon as no remaining look can pass it whatever is measured next
  (deterministic curtailment: too many ratios at or above 1, or too many at or above 1 - margin for the median
  to get below it). This costs no error at all: the verdict is the one the full run would have reached. On an
  A/A pair half the ratios are >= 1, so a challenger that cannot win stops after a few rounds.
- When every challenger is decided, the re-measurement ends. A route decided drops out of the rotation."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trt_routes import PROTOCOL_VERSION, canonical
from trt_routes.evidence import TrialStatus
from trt_routes.routes import describe
from trt_routes.selection.rank import DEFAULT_ROUTE, RULE, Selection, Verdict
from trt_routes.selection.sequential import (
    ERROR_CAP,
    ChallengerResult,
    Decision,
    Stopping,
    median_interval,
    statistic_of,
    turn_runs,
)

if TYPE_CHECKING:  # annotations only: a worker unpickles Stopping and needs no manifest (nor pydantic)
    from trt_routes.manifest.schema import Confirm

CONFIRM_RULE = ("; a non-default winner must then beat the default route re-measured side by side "
                "(interleaved rounds in one worker): its time ratio to the default below 1 - margin and the "
                "upper end of the ratio's confidence interval below 1, else the default stays; a locked "
                "winner is replaced only by a route that beats it the same way")


@dataclass(frozen=True)
class Remeasurement:
    """One side-by-side re-measurement: slot medians (ms) in the order they were taken."""

    baseline: str
    challengers: tuple[str, ...]
    slots: tuple[tuple[str, float], ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def pairs(self, route: str) -> list[tuple[int, int]]:
        """(``route``'s slot, its baseline slot) by index, in the order measured. A challenger slot's baseline
        slot is the one just before it, or else the one just after it (``run_sequential`` puts two challengers
        around one baseline turn: C B C). A baseline slot is paired with at most one slot of each challenger,
        so each challenger's ratios are independent when the slots are. A failed turn (a time of 0, below 0 or
        NaN, on either side) gives no pair, as in the worker."""
        slots, base = self.slots, self.baseline
        out = []
        for i, (r, t) in enumerate(slots):
            if r != route or not t > 0:
                continue
            j = i - 1 if i > 0 and slots[i - 1][0] == base else \
                i + 1 if i + 1 < len(slots) and slots[i + 1][0] == base else None
            if j is not None and slots[j][1] > 0:
                out.append((i, j))
        return out

    def paired_ratios(self, route: str) -> list[float]:
        """``route``'s slot time over its baseline slot's, per pair (``pairs``), in the order measured."""
        return [self.slots[i][1] / self.slots[j][1] for i, j in self.pairs(route)]

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "challengers": list(self.challengers),
                "slots": [[r, t] for r, t in self.slots], "meta": dict(self.meta)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Remeasurement:
        return cls(data["baseline"], tuple(data["challengers"]),
                   tuple((str(r), float(t)) for r, t in data["slots"]), data.get("meta") or {})


#: The rule of a job with a ``baseline:``: the baseline takes the default route's place.
CONFIRM_RULE_BASELINE = ("; a winner other than the job's baseline must then beat the baseline re-measured "
                         "side by side (interleaved rounds in one worker): its time ratio to the baseline below "
                         "1 - margin and the upper end of the ratio's confidence interval below 1, else the "
                         "baseline stays; a locked winner is replaced only by a route that beats it the same way")


def decide(m: Remeasurement, settings: Confirm, seed: int = 0, label: str | None = None,
           statistic: str = "p50") -> Decision:
    """Which challenger (if any) beats the baseline beyond the margin and the noise; of those, the one
    with the lowest median slot time wins.

    Per challenger: its paired ratios r (challenger time / baseline time) in the order measured, replayed
    through the sequential design (``Stopping``): it passes at the first look whose boundary it meets
    (its median below 1 - margin and the order-statistic interval's upper end below 1, at that look's
    level), and fails once no look can pass it. The reason shows the median and the interval at
    ``settings.confidence`` split over the challengers (Bonferroni) over the ratios the verdict used."""
    k = max(1, len(m.challengers))
    confidence = 1.0 - (1.0 - settings.confidence) / k
    stopping = Stopping.of(settings, k)
    if label is None:
        label = "the default" if m.baseline == DEFAULT_ROUTE else f"the locked winner {describe(m.baseline)}"
    results = []
    for route in m.challengers:
        ratios = m.paired_ratios(route)
        verdict, used = stopping.verdict(ratios)
        ratios = ratios[:used]
        if not ratios or (verdict is None and len(ratios) < 2):  # decided against at one ratio is shown
            results.append(ChallengerResult(route, None, None, None, len(ratios), False,
                                            "not confirmed: too few side-by-side rounds were measured"))
            continue
        median, low, high = median_interval(ratios, confidence)
        gain, noise = 1.0 - median, high - median
        early = f", stopped early at {len(ratios)} of {settings.rounds}" if len(ratios) < settings.rounds else ""
        what = "the time" if statistic == "p50" else f"the {statistic} latency"
        split = f", the {settings.confidence:.0%} split over {k} challengers" if k > 1 else ""
        interval = (f"{confidence:.1%} interval {low:.3f}-{high:.3g}{split}" if math.isfinite(high) else
                    f"too few rounds for a {confidence:.1%} interval{split}")
        shown = f"{median:.3f}x {what} of {label} ({interval}, {len(ratios)} interleaved rounds{early})"
        if verdict == "pass":
            passed, reason = True, f"confirmed: {shown}; beats the margin {settings.margin:.1%} and the noise"
        elif median >= 1.0 - settings.margin:
            passed, reason = False, (f"not confirmed: {shown}; a gain of {gain:.1%} is not above the margin "
                                     f"{settings.margin:.1%}")
        else:
            passed, reason = False, (f"not confirmed: {shown}; the gain of {gain:.1%} is within the noise "
                                     f"(+{noise:.1%})" if math.isfinite(noise) else
                                     f"not confirmed: {shown}; too few rounds to tell a gain of {gain:.1%} from "
                                     "the noise")
        results.append(ChallengerResult(route, median, low, high, len(ratios), passed, reason))
    confirmed = [r for r in results if r.passed]
    # among the confirmed, the fastest by its own slot times: all were timed in the same rounds, and
    # unlike the ratios these do not carry the baseline's noise (a launch-bound default's, say)
    own = {r.route: statistics.median([t for route, t in m.slots if route == r.route]) for r in confirmed}
    winner = (min(confirmed, key=lambda r: (own[r.route], len(r.route.split()), r.route)).route
              if confirmed else m.baseline)
    results = [dataclasses.replace(r, reason=f"{r.reason}, but the winner ran faster in the same rounds "
                                             f"({own[winner]:.3g} ms against {own[r.route]:.3g} ms, the median "
                                             "of each one's own turns)")
               if r.passed and r.route != winner else r for r in results]
    load = {k: float(m.meta[k]) for k in LOAD_FIELDS if isinstance(m.meta.get(k), (int, float))}
    return Decision(m.baseline, winner, tuple(results), load or None)


#: The noise context's fields a decision carries into the lock and explain: under what load it was made.
LOAD_FIELDS = ("cpu_busy_others", "loadavg", "cpu_count")


# -- the final selection ---------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A re-measurement ``resolve`` needs: ``challengers`` against ``baseline``."""

    baseline: str
    challengers: tuple[str, ...]


#: The re-measurement's design, part of its cache key: "sequential-1" slots stop as ``Stopping`` decides,
#: so they are not the fixed-length rounds of earlier versions (which read them under other keys);
#: "sequential-2" puts two challengers around one baseline turn (C B C, ``run_sequential``), which versions
#: that pair a challenger only with the turn before it would read wrong, hence a key of its own.
DESIGN = "sequential-2"
#: Designs whose stored records this version reads (``Remeasurement.paired_ratios`` pairs both layouts alike:
#: every "sequential-1" challenger slot follows its baseline slot), newest first; only ``DESIGN`` is written.
READ_DESIGNS = (DESIGN, "sequential-1")
#: How turns are sized (``turn_target``; part of the key where turns are sized): "mad-2" for the margin / sqrt 2
#: target. Records of "mad-1" (margin / (2 sqrt 2): the same turns, up to four times the runs, so more precise
#: ratios) are read alike, so an upgrade re-measures nothing; only ``SIZING`` is written.
SIZING = "mad-2"
READ_SIZINGS = (SIZING, "mad-1")
#: The turns' engines were loaded afresh for each turn (``Backend.reload_each_turn``: ONNX Runtime), not kept
#: loaded side by side; part of the key, so records measured with kept sessions (which slowed each other on
#: small hosts) are not read as these.
TURNS_RELOAD = "reload-1"


def remeasure_key(group_key: str, baseline: str, challengers: Sequence[str], settings: Confirm,
                  rule: bool = False, statistic: str = "p50", turns: str = "", design: str = DESIGN,
                  sizing: str = SIZING) -> str:
    """Cache key of a re-measurement: the job group, the routes and the re-measurement protocol. Not the
    margin or confidence: a stored record is reused under another rule wherever it decides every challenger
    under that rule too (``decides``; each challenger's ratios are a sequence any stopping rule may read).
    ``rule``: the key of a record measured because the rule-free one did not decide under this rule (then
    margin, confidence and the error cap are part of it). ``turns``: ``TURNS_RELOAD`` for a backend whose
    turns load their engine afresh (keys of other backends read as before). ``design``: an older one of
    ``READ_DESIGNS``, to read what it stored; ``sizing``: an older one of ``READ_SIZINGS``, likewise."""
    protocol: dict[str, Any] = {"rounds": settings.rounds, "iterations": settings.iterations,
                                "slot_ms": settings.slot_ms, "protocol": PROTOCOL_VERSION, "design": design}
    if settings.max_slot_ms > 0:  # turns sized to the noise (sizing off: keys read as before it)
        protocol.update(max_slot_ms=settings.max_slot_ms, sizing=sizing)
    if rule:
        protocol.update(margin=settings.margin, confidence=settings.confidence, error_cap=ERROR_CAP)
    if statistic != "p50":  # a tail objective's turns are quantiles of more runs (median keys read as before)
        protocol.update(statistic=statistic, turn_runs=turn_runs(statistic, settings.iterations))
    if turns:
        protocol.update(turns=turns)
    return canonical.digest([group_key, baseline, sorted(challengers), protocol], 32)


def decides(m: Remeasurement, settings: Confirm) -> bool:
    """Whether ``m`` reaches a verdict on every challenger under ``settings`` (a record stopped early by
    another rule may not: then it is measured anew, not decided from too few rounds)."""
    stopping = Stopping.of(settings, len(m.challengers))
    return all(stopping.verdict(m.paired_ratios(c))[0] is not None or len(m.paired_ratios(c)) >= settings.rounds
               for c in m.challengers)


Lookup = Callable[[str, tuple[str, ...]], Remeasurement | None]


def challengers(sel: Selection, count: int, exclude: str = DEFAULT_ROUTE,
                rank: str | None = None) -> tuple[str, ...]:
    """The best ``count`` eligible routes other than ``exclude`` that could beat it (their interval starts
    below the end of its interval; medians where intervals are missing), by median (ties: fewer knobs).
    ``rank``: a tail latency fact (``latency.p90``, ``latency.p99``): by that fact from the trials, those
    below ``exclude``'s (a quantile of one trial's samples has no interval here)."""
    if rank is not None and statistic_of(rank) not in (None, "p50"):
        return _tail_challengers(sel, count, exclude, rank)
    base = sel.verdict(exclude)
    bound = (base.ci_high if base.ci_high is not None else base.median_ms) if base is not None else None

    def plausible(v: Verdict) -> bool:
        low = v.ci_low if v.ci_low is not None else v.median_ms
        return bound is None or low is None or low < bound

    eligible = [v for v in sel.verdicts if v.eligible and v.route != exclude and v.median_ms is not None
                and plausible(v)]
    eligible.sort(key=lambda v: (v.median_ms, len(v.route.split()), v.route))
    return tuple(v.route for v in eligible[:count])


def _tail_challengers(sel: Selection, count: int, exclude: str, rank: str) -> tuple[str, ...]:
    base = sel.verdict(exclude)
    bound = base.facts.get(rank) if base is not None else None
    eligible = [v for v in sel.verdicts if v.eligible and v.route != exclude and rank in v.facts
                and (bound is None or v.facts[rank] < bound)]
    eligible.sort(key=lambda v: (v.facts[rank], len(v.route.split()), v.route))
    return tuple(v.route for v in eligible[:count])


def resolve(sel: Selection, settings: Confirm | None, locked: str | None, lookup: Lookup,
            seed: int = 0, baseline: str = DEFAULT_ROUTE, rank: str | None = None) -> tuple[Selection, list[Request]]:
    """The selection after confirmation, and the re-measurements still missing (then the returned
    selection keeps the raw winner; apply measures the requests and resolves again).

    1. If the baseline (the job's ``baseline``: the default route unless the manifest names one) is
       eligible, the best ``settings.candidates`` other eligible routes are re-measured against it; the
       best confirmed one wins, else the baseline.
    2. No churn: if ``locked`` (the lock's route) is eligible and differs from that pick, the pick is
       re-measured against it and replaces it only when confirmed; otherwise the locked route stays.

    ``rank``: the objective's rank fact; a tail latency (p90, p99) is confirmed on that quantile of each
    turn (``turn_runs`` runs per turn), the median otherwise."""
    statistic = statistic_of(rank) or "p50"
    base = sel.verdict(baseline)
    if baseline != DEFAULT_ROUTE:  # a job without one keeps its selection exactly as before baselines
        sel = dataclasses.replace(sel, baseline=baseline, baseline_ms=base.median_ms if base is not None and
                                  base.status == TrialStatus.OK else None)
    if settings is None or sel.winner is None:
        return sel, []
    if base is None or not base.eligible:
        what = "the default route" if baseline == DEFAULT_ROUTE else f"the baseline {describe(baseline)}"
        return _note(sel, f"no confirmation: {what} is not eligible, so nothing to compare with"), []
    label = None if baseline == DEFAULT_ROUTE else f"the baseline {describe(baseline)}"
    chal = challengers(sel, settings.candidates, exclude=baseline, rank=rank)
    first: Decision | None = None
    pick = baseline
    if chal:
        m = lookup(baseline, chal)
        if m is None:
            return sel, [Request(baseline, chal)]
        first = decide(m, settings, seed, label, statistic)
        pick = first.winner
    second: Decision | None = None
    held = sel.verdict(locked) if locked is not None else None
    if locked is not None and locked != pick and locked != baseline and held is not None and held.eligible:
        m2 = lookup(locked, (pick,))
        if m2 is None:
            return sel, [Request(locked, (pick,))]
        second = decide(m2, settings, seed, statistic=statistic)
        pick = second.winner
    return _final(sel, settings, first, second, pick, baseline, statistic), []


def _note(sel: Selection, text: str) -> Selection:
    return dataclasses.replace(sel, confirmation={"note": text})


def _final(sel: Selection, settings: Confirm, first: Decision | None, second: Decision | None,
           pick: str, baseline: str = DEFAULT_ROUTE, statistic: str = "p50") -> Selection:
    by_route = {v.route: v for v in sel.verdicts}
    winner = by_route[pick]
    default = by_route.get(DEFAULT_ROUTE)
    named = baseline != DEFAULT_ROUTE
    what = f"the baseline {describe(baseline)}" if named else "the default route"
    verdicts: list[Verdict] = []
    for v in sel.verdicts:
        reason = v.reason
        r1 = first.result(v.route) if first else None
        r2 = second.result(v.route) if second else None
        if v.route == pick:
            if pick == baseline:
                reason = f"winner: {what} stays: no other route beat it side by side beyond the " \
                         f"margin ({settings.margin:.0%}) and the noise"
            elif second is not None and pick == second.baseline:
                reason = f"winner: the locked winner stays ({(r1.reason if r1 else 'confirmed earlier')})"
            else:
                reason = "winner: " + (r2.reason if r2 else r1.reason if r1 else v.reason)
        elif v.route == sel.winner and v.route != baseline:
            reason = f"fastest in the search ({v.median_ms:.3g} ms); " + \
                     ((r2 or r1).reason if (r2 or r1) else "not confirmed")  # type: ignore[union-attr]
        elif v.route == sel.winner:  # the baseline led the search, and a challenger beat it side by side
            reason = f"fastest in the search ({v.median_ms:.3g} ms), but {describe(pick)} beat it side by side"
        elif r2 is not None or r1 is not None:
            reason = f"{v.reason}; {(r2 or r1).reason}"  # type: ignore[union-attr]
        verdicts.append(dataclasses.replace(v, reason=reason))
    if pick == baseline:
        ratios = [(r.ratio, r) for r in first.results if r.ratio is not None] if first else []
        best = min(ratios, key=lambda pair: pair[0])[1] if ratios else None
        others = [v for v in sel.verdicts if v.eligible and v.route != baseline]
        summary = (f"baseline {describe(baseline)} kept: " if named else "default route kept: ") + (
            f"the best challenger side by side, {describe(best.route)}, "
            f"{best.reason.removeprefix('not confirmed: ')}" if best is not None else
            f"it was the fastest of the {len(others) + 1} eligible routes in the search, so none was re-measured "
            "side by side" if others else "no other eligible route")
    elif second is not None and pick == second.baseline:
        r = second.results[0]
        summary = (f"{describe(pick)} kept (the locked winner): the challenger {describe(r.route)} is "
                   f"{r.reason.removeprefix('not confirmed: ')}")
    else:
        chosen = (second.result(pick) if second else None) or (first.result(pick) if first else None)
        summary = f"{describe(pick)} chosen: {chosen.reason if chosen else 'confirmed'}"
    data = {"margin": settings.margin, "confidence": settings.confidence, "rounds": settings.rounds,
            "iterations": settings.iterations, "slot_ms": settings.slot_ms, "max_slot_ms": settings.max_slot_ms,
            "vs_default": first.to_json() if first and not named else None,
            "vs_locked": second.to_json() if second else None, "raw_winner": sel.winner}
    if statistic != "p50":  # kept apart, so entries confirmed on medians read as before
        data["statistic"] = statistic
        data["turn_runs"] = turn_runs(statistic, settings.iterations)
    if named:  # kept apart, so entries of jobs without a baseline read as before
        data["baseline"] = baseline
        data["vs_baseline"] = first.to_json() if first else None
        vs = first.result(pick) if first else None
        data["baseline_ratio"] = (vs.ratio if vs is not None else 1.0 if pick == baseline else None)
    return dataclasses.replace(
        sel, winner=pick, chosen_ms=winner.median_ms, verdicts=tuple(verdicts), summary=summary,
        rule=RULE + (CONFIRM_RULE_BASELINE if named else CONFIRM_RULE), confirmation=data,
        default_ms=default.median_ms if default is not None else sel.default_ms,
        baseline=baseline if named else sel.baseline,
        baseline_ms=by_route[baseline].median_ms if named else sel.baseline_ms)
