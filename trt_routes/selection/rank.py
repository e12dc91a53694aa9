"""Selection: a pure function of (trials, candidates, tolerance, objective) that picks the winner and says
why every other route lost. Accuracy decides eligibility; without an objective the median time ranks the
eligible (the rule since the start, messages unchanged).

With an objective (the manifest's ``objectives``, ``trt_routes.evidence.facts``): accuracy decides eligibility, then
the objective's ``limits`` filter (a route over a limit, or without the fact, is not eligible: "over the
limit: engine_mb 250 > 200"), then its ``rank`` fact orders the rest (lower is better; ``throughput``:
higher), ties to the default route, then fewer knobs. Confirmation (``selection.confirm``) re-measures
timings side by side: medians for ``latency.p50`` and ``throughput``, each turn's p90 or p99 for a tail
objective; for memory, engine size, build time and energy the objective decides from the trials' stored
facts and the selection says it was not confirmed, and why."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trt_routes.evidence import TrialStatus
from trt_routes.evidence import facts as facts_
from trt_routes.routes import DEFAULT_ROUTE, describe

if TYPE_CHECKING:  # the cache and the manifest's schema (and pydantic) stay out of a worker
    from trt_routes.cache.store import TrialRecord  # process, which unpickles Stopping
    from trt_routes.manifest.schema import Check, Objective, Tolerance

#: Computes a loss the trial did not store (e.g. l0 at new atol/rtol) or returns None.
LossLookup = Callable[["TrialRecord", str, "Check"], float | None]

RULE = ("eligible = built, every output finite and every loss strictly below its threshold; "
        "winner = lowest median latency among eligible routes (ties: default route, then fewer knobs)")


@dataclass(frozen=True)
class Verdict:
    route: str
    status: str
    eligible: bool
    reason: str
    median_ms: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    failed_checks: tuple[str, ...] = ()
    trial_id: str = ""
    #: the trial's facts (``trt_routes.evidence.facts.derived``): latency quantiles, memory, engine size, energy, ...
    facts: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Selection:
    winner: str | None
    default_ms: float | None
    chosen_ms: float | None
    verdicts: tuple[Verdict, ...]
    summary: str
    rule: str = RULE
    missing: tuple[str, ...] = field(default_factory=tuple)
    #: the side-by-side confirmation that decided (``trt_routes.selection.confirm``), JSON-ready; None without one
    confirmation: dict[str, Any] | None = None
    #: the route the job must beat (``baseline:``; the default route unless named) and its median
    baseline: str = DEFAULT_ROUTE
    baseline_ms: float | None = None
    #: how the manifest named the baseline, for ``baseline: {presets: [...]}`` (the preset that won); else ""
    baseline_source: str = ""
    #: the objective that ranked (name and its dict); "" / None: the lowest median, as always
    objective_name: str = ""
    objective: dict[str, Any] | None = None

    @property
    def baseline_speedup(self) -> float | None:
        """The baseline's time over the winner's: the confirmed side-by-side ratio when confirmation
        compared them, else the ratio of the search's medians."""
        ratio = (self.confirmation or {}).get("baseline_ratio")
        if isinstance(ratio, (int, float)) and ratio > 0:
            return 1.0 / float(ratio)
        if self.baseline_ms and self.chosen_ms:
            return self.baseline_ms / self.chosen_ms
        return None

    @property
    def speedup(self) -> float | None:
        if self.default_ms and self.chosen_ms:
            return self.default_ms / self.chosen_ms
        return None

    def verdict(self, route: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.route == route), None)


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def gate(trial: TrialRecord, tolerance: Tolerance, lookup: LossLookup | None = None) -> list[str]:
    """Failed checks of ``trial`` as human strings; empty when the trial passes."""
    failures: list[str] = []
    for output in sorted(trial.losses):
        per = trial.losses[output]
        for check in tolerance.checks_for(output):
            value = per.get(check.key)
            if value is None and lookup is not None:
                value = lookup(trial, output, check)
            if value is None:
                failures.append(f"{output}: {check.key} not measured")
            elif not math.isfinite(value) or value >= check.threshold:
                point = (trial.meta.loss_points or {}).get(output, {}).get(check.key)
                failures.append(f"{output}: {check.key} {_fmt(value)} >= {_fmt(check.threshold)}"
                                + (f" at the profile's {point}" if point else ""))
    for output in sorted(set(tolerance.outputs) - set(trial.losses)):
        failures.append(f"{output}: tolerance names an output the model does not have")
    return failures


def failing_checks(trial: TrialRecord, tolerance: Tolerance,
                   lookup: LossLookup | None = None) -> list[tuple[str, Check, float]]:
    """(output, check, loss) of every check ``trial`` fails on a measured, finite loss."""
    out = []
    for output in sorted(trial.losses):
        for check in tolerance.checks_for(output):
            value = trial.losses[output].get(check.key)
            if value is None and lookup is not None:
                value = lookup(trial, output, check)
            if value is not None and math.isfinite(value) and value >= check.threshold:
                out.append((output, check, value))
    return out


def _looser(value: float) -> str:
    """A threshold just above ``value`` (two significant digits, rounded up): the loosest that admits it."""
    if value <= 0:
        return "any positive threshold"
    exp = math.floor(math.log10(value)) - 1
    return f"{math.ceil(value / 10**exp * 1.0001 + 1e-9) * 10**exp:.2g}"


def _no_eligible(prelim: list[Verdict], trials: Mapping[str, TrialRecord], tolerance: Tolerance,
                 lookup: LossLookup | None) -> str:
    """Why no route is eligible, by cause: all crashed (the first error), or which checks failed."""
    if not prelim:
        return "no eligible route: nothing was measured"
    broken = [v for v in prelim if v.status != TrialStatus.OK or v.median_ms is None]
    gated = [v for v in prelim if v not in broken]
    if not gated:
        first = broken[0]
        return (f"no eligible route: all {len(broken)} route(s) crashed, timed out or failed to build; the first, "
                f"{describe(first.route)}: {first.reason} (fix the cause, then `trt-routes apply --retry-failed`)")
    parts = [f"{describe(v.route)}: {'; '.join(v.failed_checks)}" for v in gated[:4]]
    more = f"; and {len(gated) - 4} more" if len(gated) > 4 else ""
    crashed = f"; {len(broken)} other route(s) crashed or failed to build" if broken else ""
    line = (f"no eligible route: {len(gated)} route(s) failed the accuracy gate ({' | '.join(parts)}{more})"
            f"{crashed}")
    default = trials.get(DEFAULT_ROUTE)
    if default is not None and default.status == TrialStatus.OK and default.median_ms is not None:
        fails = failing_checks(default, tolerance, lookup)
        unrelated = [out for out, check, value in fails if check.metric == "cos" and value >= 1.0]
        if unrelated:  # no threshold a tolerance could sensibly take would admit it: say what it means
            line += (f"; even the default route's {', '.join(unrelated)} is unrelated to the reference (cos "
                     f"loss >= 1: e.g. outputs that underflow to zero in a lower precision): check the model's "
                     f"precision and the reference before loosening any tolerance")
        elif fails:
            needed = ", ".join(f"{out} {check.metric} < {_looser(value)} (now {_fmt(check.threshold)})"
                               for out, check, value in fails)
            line += f"; the default route would pass with {needed}"
    return line


def _status_reason(trial: TrialRecord) -> str:
    if trial.status == TrialStatus.CRASHED:
        return f"crashed: {trial.error or 'worker died'}"
    if trial.status == TrialStatus.TIMEOUT:
        return f"timed out: {trial.error}"
    if trial.status == TrialStatus.BUILD_ERROR:
        return f"build error: {trial.error}"
    if trial.status == TrialStatus.ACCURACY_FAILED:
        return f"accuracy failed: {trial.error}"
    return trial.status


def _rank(v: Verdict) -> tuple[float, int, int, str]:
    return (v.median_ms if v.median_ms is not None else math.inf, 0 if v.route == DEFAULT_ROUTE else 1,
            len(v.route.split()), v.route)


def trial_facts(trial: TrialRecord, batch: int | None = None) -> dict[str, float]:
    """``trial``'s facts: stored ones and what its samples and fields give (``trt_routes.evidence.facts.derived``)."""
    stored = trial.meta.facts
    return facts_.derived(stored if isinstance(stored, dict) else None, trial.samples, trial.median_ms,
                          trial.build_s, batch)


def select(trials: Mapping[str, TrialRecord], candidates: list[str], tolerance: Tolerance,
           lookup: LossLookup | None = None, objective: Objective | None = None, objective_name: str = "",
           batch: int | None = None) -> Selection:
    """Pick the fastest eligible candidate (or the best by ``objective``, see the module docstring).
    Routes without a trial are listed in ``missing``. ``batch``: throughput's batch for trials that did
    not store it."""
    if objective is not None:
        return _select_objective(trials, candidates, tolerance, lookup, objective, objective_name, batch)
    routes = list(dict.fromkeys([DEFAULT_ROUTE, *candidates]))
    prelim: list[Verdict] = []
    missing: list[str] = []
    for route in routes:
        trial = trials.get(route)
        if trial is None:
            missing.append(route)
            continue
        if trial.status != TrialStatus.OK or trial.median_ms is None:
            prelim.append(Verdict(route, trial.status, False, _status_reason(trial), trial.median_ms,
                                  trial.ci_low, trial.ci_high, trial_id=trial.id))
            continue
        failures = gate(trial, tolerance, lookup)
        prelim.append(Verdict(route, trial.status, not failures,
                              "failed accuracy gate: " + "; ".join(failures) if failures else "",
                              trial.median_ms, trial.ci_low, trial.ci_high, tuple(failures), trial.id,
                              trial_facts(trial, batch)))
    eligible = sorted((v for v in prelim if v.eligible), key=_rank)
    default = trials.get(DEFAULT_ROUTE)
    default_ms = default.median_ms if default is not None and default.status == TrialStatus.OK else None
    winner = eligible[0] if eligible else None
    verdicts: list[Verdict] = []
    for v in prelim:
        if winner is not None and v.route == winner.route:
            if default_ms:
                vs = f"{default_ms / v.median_ms:.2f}x vs default {_fmt(default_ms)} ms"  # type: ignore[operator]
            else:
                vs = "the default route is not eligible"
            lead = ("winner: fastest eligible route, " if v.route != DEFAULT_ROUTE else
                    "winner: the default route is the fastest eligible route, ")
            reason = lead + f"{_fmt(v.median_ms)} ms ({vs})"  # type: ignore[arg-type]
            verdicts.append(Verdict(**{**v.__dict__, "reason": reason}))
        elif v.eligible and winner is not None:
            slower = (v.median_ms / winner.median_ms - 1) * 100  # type: ignore[operator]
            reason = (f"slower: {_fmt(v.median_ms)} ms, +{slower:.1f}% vs winner"  # type: ignore[arg-type]
                      if slower > 0 else f"tied with the winner at {_fmt(v.median_ms)} ms; "  # type: ignore[arg-type]
                      "the tie-break prefers the default route, then fewer knobs")
            verdicts.append(Verdict(**{**v.__dict__, "reason": reason}))
        else:
            verdicts.append(v)
    if winner is None:
        summary = _no_eligible(prelim, trials, tolerance, lookup)
    elif winner.route == DEFAULT_ROUTE:
        summary = f"default route kept: no eligible route was faster ({_fmt(winner.median_ms)} ms)"  # type: ignore[arg-type]
    else:
        summary = (f"{describe(winner.route)} chosen: {_fmt(winner.median_ms)} ms"  # type: ignore[arg-type]
                   + (f", {default_ms / winner.median_ms:.2f}x faster than the default route"  # type: ignore[operator]
                      if default_ms else ", the default route is not eligible"))
    return Selection(winner=winner.route if winner else None, default_ms=default_ms,
                     chosen_ms=winner.median_ms if winner else None, verdicts=tuple(verdicts),
                     summary=summary, missing=tuple(missing))


def _limit_failures(values: Mapping[str, float], objective: Objective) -> list[str]:
    out = []
    for fact in sorted(objective.limits):
        limit = objective.limits[fact]
        if fact not in values:
            out.append(f"{fact} not measured")
        elif values[fact] > limit:
            out.append(f"{fact} {_fmt(values[fact])} > {limit:g}")
    return out


def _select_objective(trials: Mapping[str, TrialRecord], candidates: list[str], tolerance: Tolerance,
                      lookup: LossLookup | None, objective: Objective, name: str,
                      batch: int | None) -> Selection:
    """``select`` under an objective: the accuracy gate, then the limits, then the rank fact."""
    base = select(trials, candidates, tolerance, lookup, batch=batch)
    fact, unit = objective.rank, facts_.UNITS[objective.rank]
    label = f"objective '{name}'" if name else "the objective"
    prelim: list[Verdict] = []
    for v in base.verdicts:
        if not v.eligible:
            prelim.append(v)
            continue
        over = _limit_failures(v.facts, objective)
        if over:
            missing = all(o.endswith("not measured") for o in over)
            prelim.append(dataclasses.replace(
                v, eligible=False, failed_checks=tuple(over),
                reason=(f"not measured: {', '.join(o.split()[0] for o in over)} (limited by {label}; the trial "
                        "predates facts or this host cannot measure them)") if missing else
                f"over the limit: {'; '.join(over)}"))
        elif fact not in v.facts:
            prelim.append(dataclasses.replace(
                v, eligible=False, failed_checks=(f"{fact} not measured",),
                reason=f"not measured: {fact} (ranked by {label}; the trial predates facts or this host cannot "
                       "measure it)"))
        else:
            prelim.append(v)
    sign = -1.0 if fact in facts_.HIGHER_IS_BETTER else 1.0

    def key(v: Verdict) -> tuple[float, int, int, str]:
        return (sign * v.facts[fact], 0 if v.route == DEFAULT_ROUTE else 1, len(v.route.split()), v.route)

    eligible = sorted((v for v in prelim if v.eligible), key=key)
    winner = eligible[0] if eligible else None
    default = next((v for v in prelim if v.route == DEFAULT_ROUTE), None)
    default_value = default.facts.get(fact) if default is not None and default.eligible else None
    verdicts: list[Verdict] = []
    for v in prelim:
        if winner is not None and v.route == winner.route:
            value = v.facts[fact]
            vs = (f"default {_fmt(default_value)} {unit}" if default_value is not None and v.route != DEFAULT_ROUTE
                  else "the default route is not eligible" if default_value is None else "")
            reason = f"winner: best eligible route by {fact} ({label}), {_fmt(value)} {unit}"
            reason += f" ({vs})" if vs else ""
            verdicts.append(dataclasses.replace(v, reason=reason))
        elif v.eligible and winner is not None:
            a, w = v.facts[fact], winner.facts[fact]
            if a == w:
                reason = (f"tied with the winner at {fact} {_fmt(a)} {unit}; the tie-break prefers the default route, "
                          "then fewer knobs")
            else:
                pct = abs(a / w - 1) * 100 if w else math.inf
                reason = f"worse by {fact}: {_fmt(a)} {unit}, {'-' if sign < 0 else '+'}{pct:.1f}% vs winner"
            verdicts.append(dataclasses.replace(v, reason=reason))
        else:
            verdicts.append(v)
    if winner is None:
        limited = [v for v in prelim if v.failed_checks and any(
            c.endswith("not measured") or " > " in c for c in v.failed_checks) and v.status == TrialStatus.OK
            and not v.reason.startswith("failed accuracy gate")]
        summary = (f"no eligible route: {len(limited)} route(s) passed the accuracy gate but not {label} "
                   f"({' | '.join(f'{describe(v.route)}: {v.reason}' for v in limited[:4])})"
                   if limited else base.summary)
    elif winner.route == DEFAULT_ROUTE:
        summary = f"default route kept: no eligible route was better by {fact} ({_fmt(winner.facts[fact])} {unit})"
    else:
        summary = (f"{describe(winner.route)} chosen by {fact}: {_fmt(winner.facts[fact])} {unit}"
                   + (f", default {_fmt(default_value)} {unit}" if default_value is not None else
                      ", the default route is not eligible"))
    default_ms = base.default_ms
    return Selection(winner=winner.route if winner else None, default_ms=default_ms,
                     chosen_ms=winner.median_ms if winner else None, verdicts=tuple(verdicts),
                     summary=summary, missing=base.missing,
                     rule=(f"eligible = built, every output finite, every loss strictly below its threshold and "
                           f"every limit of {label} met; winner = best {fact} "
                           f"({'highest' if sign < 0 else 'lowest'}) among eligible routes (ties: default route, "
                           "then fewer knobs)"),
                     objective_name=name, objective=objective.model_dump())


#: The axes of every Pareto front (where every eligible route has them), besides the objective's facts.
FRONT_AXES = ("latency.p50", "device_memory_mb", "engine_mb", "energy")


def front_axes(objective: Objective | None) -> tuple[str, ...]:
    """The objective's rank first (a latency quantile replaces latency.p50), then memory, engine size and
    energy, then the objective's limited facts."""
    rank = objective.rank if objective is not None else "latency.p50"
    rest = [a for a in FRONT_AXES if not (a == "latency.p50" and rank.startswith("latency."))]
    limits = sorted(objective.limits) if objective is not None else []
    return tuple(dict.fromkeys([rank, *rest, *limits]))


def pareto_front(sel: Selection, objective: Objective | None) -> facts_.Front:
    """The Pareto front of ``sel``'s eligible routes over ``front_axes(objective)`` (axes a route lacks
    are left out), with why each dominated route lost."""
    points = {v.route: dict(v.facts) for v in sel.verdicts if v.eligible}
    return facts_.pareto(points, front_axes(objective), describe)


#: Dominated routes explain names in words; the rest are counted (``explain --json`` has each under ``pareto``).
DOMINATED_SHOWN = 10


def front_lines(sel: Selection, objective: Objective | None) -> list[str]:
    """The front in words, for explain: its routes with their facts (the winner marked), then the first
    ``DOMINATED_SHOWN`` dominated routes (and the winner, when dominated) and why each lost, then a count."""
    front = pareto_front(sel, objective)
    if not front.axes or not front.front:
        return []
    lines = [f"Pareto front of the eligible routes over {', '.join(front.axes)}:"]
    by_route = {v.route: v for v in sel.verdicts}
    for route in front.front:
        values = ", ".join(facts_.format_fact(a, by_route[route].facts[a]) for a in front.axes)
        lines.append(f"  {describe(route)}: {values}" + ("  <- winner" if route == sel.winner else ""))
    shown = [(route, why) for i, (route, (_, why)) in enumerate(front.dominated.items())
             if i < DOMINATED_SHOWN or route == sel.winner]
    for route, why in shown:
        lines.append(f"  {describe(route)}: {why}" + ("  (the winner: the objective ranks by one fact)"
                                                        if route == sel.winner else ""))
    if len(front.dominated) > len(shown):
        lines.append(f"  ... and {len(front.dominated) - len(shown)} more dominated route(s) "
                     "(explain --json lists each under pareto.dominated)")
    return lines
