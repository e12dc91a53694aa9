"""explain(): why a job's route was chosen, from the cache, the lockfile and the decision log.

Everything is computed here (decision in words, margin with its interval, provenance, history);
renderers only lay it out."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.facts import Front, batch_of
from trt_routes.evidence.noise import busy_summary
from trt_routes.jobs import Job, find_job
from trt_routes.lockfile import LockEntry, Lockfile
from trt_routes.plan import decision as decisions
from trt_routes.plan.diff import stale_reasons
from trt_routes.project import LossLookupFromBlobs, Project
from trt_routes.routes import describe, route_dict
from trt_routes.selection.headline import headline
from trt_routes.selection.rank import DEFAULT_ROUTE, Selection, front_lines, pareto_front, trial_facts

CONFIDENCE = 0.95
_RESAMPLES = 2000


@dataclass(frozen=True)
class Margin:
    """How much faster ``route`` is than the default route: default median / route median."""

    route: str
    ratio: float
    low: float
    high: float
    method: str

    @property
    def certain(self) -> bool:
        """The whole interval lies on one side of 1.0x."""
        return self.low > 1.0 or self.high < 1.0

    def text(self) -> str:
        return (f"{self.ratio:.2f}x ({CONFIDENCE:.0%} CI {self.low:.2f}x-{self.high:.2f}x, {self.method})")

    def to_json(self) -> dict[str, Any]:
        return {"route": self.route, "ratio": self.ratio, "ci": [self.low, self.high], "method": self.method}


def margin(default: TrialRecord, other: TrialRecord, seed: int = 0) -> Margin | None:
    """The speed ratio default/other with an interval: a seeded bootstrap of both sample sets when
    both are stored, otherwise the conservative bounds from the two stored intervals."""
    if not (default.median_ms and other.median_ms):
        return None
    ratio = default.median_ms / other.median_ms
    import numpy as np  # here, not at the top: every command imports this module, few call margin

    a = np.asarray(default.samples, dtype=np.float64)
    b = np.asarray(other.samples, dtype=np.float64)
    if a.size >= 2 and b.size >= 2 and np.isfinite(a).all() and np.isfinite(b).all() and (b > 0).all():
        rng = np.random.default_rng(seed)
        ma = np.median(a[rng.integers(0, a.size, size=(_RESAMPLES, a.size))], axis=1)
        mb = np.median(b[rng.integers(0, b.size, size=(_RESAMPLES, b.size))], axis=1)
        tail = (1.0 - CONFIDENCE) / 2.0
        low, high = (float(v) for v in np.quantile(ma / mb, [tail, 1.0 - tail]))
        return Margin(other.route, ratio, min(low, ratio), max(high, ratio),
                      f"bootstrap of {a.size}+{b.size} samples")
    if default.ci_low and default.ci_high and other.ci_low and other.ci_high:
        return Margin(other.route, ratio, default.ci_low / other.ci_high, default.ci_high / other.ci_low,
                      "bounds from the stored intervals")
    return None


@dataclass
class Explanation:
    job: Job
    selection: Selection | None
    trials: list[TrialRecord]
    lock: LockEntry | None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    signature: dict[str, str] | None = None
    other_groups: int = 0
    margin: Margin | None = None
    decision: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    older: list[dict[str, Any]] = field(default_factory=list)
    #: the Pareto front of the eligible routes over the objective's facts (``selection.rank.pareto_front``)
    front: Front | None = None
    front_lines: list[str] = field(default_factory=list)  # the front in words (also in ``decision``)
    #: whose decision this is: ``{"by": "apply", "at": ...}`` (stored when apply locked the job) or
    #: ``{"by": "trials", "at": None}`` (derived now: none stored for these trials; ``note`` says why)
    decided: dict[str, Any] = field(default_factory=dict)

    def verdict(self, route: str) -> str:
        v = self.selection.verdict(route) if self.selection else None
        return v.reason if v else "not a candidate of the current search"

    def to_json(self) -> dict[str, Any]:
        sel = self.selection
        return {
            "job": self.job.name,
            "rule": sel.rule if sel else None,
            "summary": sel.summary if sel else "no trials measured under this job's current signature",
            "decision": self.decision,
            "winner": sel.winner if sel else None,
            "default_ms": sel.default_ms if sel else None,
            "chosen_ms": sel.chosen_ms if sel else None,
            "speedup": headline(sel).to_json() if sel else None,
            "baseline": {"route": sel.baseline if sel and self.job.baseline_choices else self.job.baseline,
                         "source": sel.baseline_source if sel and sel.baseline_source else self.job.baseline_source,
                         "median_ms": sel.baseline_ms if sel else None,
                         "speedup": sel.baseline_speedup if sel else None},
            "margin": self.margin.to_json() if self.margin else None,
            "tolerance": {"name": self.job.tolerance_name, **self.job.tolerance.model_dump(mode="json")},
            "trials": [
                {"route": t.route, "status": t.status, "median_ms": t.median_ms,
                 "ci_ms": [t.ci_low, t.ci_high], "losses": t.losses, "build_s": t.build_s,
                 "error": t.error or None, "created_at": t.created_at, "host": t.host, "source": t.source,
                 "verdict": self.verdict(t.route), "facts": trial_facts(t, batch_of(self.job.inputs))}
                for t in self.trials
            ],
            "signature": self.signature,
            "provenance": self.provenance,
            "lock": self.lock.to_data() if self.lock is not None else None,
            "history": self.decisions,
            "decided": self.decided,
            "trials_under_other_signatures": self.other_groups,
            "older_groups": self.older,
            "objective": ({"name": self.job.objective_name, **self.job.objective.model_dump(mode="json")}
                          if self.job.objective is not None else None),
            "pareto": ({"axes": list(self.front.axes), "front": list(self.front.front),
                        "dominated": {r: {"by": by, "reason": why} for r, (by, why) in self.front.dominated.items()}}
                       if self.front is not None else None),
        }


def explain(project: Project, name: str) -> Explanation:
    job = find_job(project.jobs, name)
    with project.read_cache() as cache:
        return explain_job(project, job, cache, project.read_lock())


def explain_job(project: Project, job: Job, cache: CacheStore, lock: Lockfile) -> Explanation:
    """The explanation of one job against an open cache and a read lockfile (no writes): the decision apply
    stored for these trials (``trt_routes.plan.decision``), else the one they give now, said so."""
    entry = lock.jobs.get(job.name)
    trials = cache.group(job.group_key) if not job.blocked else {}
    made = decisions.stored(cache, job)
    fresh = made is not None and made.group_key == job.group_key and made.trials == decisions.inputs_digest(job, trials)
    decided = {"by": "apply", "at": made.at} if fresh and made is not None else {"by": "trials", "at": None}
    if not fresh and trials:
        if made is not None and made.group_key == job.group_key:
            decided["note"] = (f"the job's trials or how it chooses (tolerance, objective, baseline, confirmation) "
                               f"changed since apply decided ({made.at}): this is what they select now")
        made = decisions.derive(job, cache, trials, entry, LossLookupFromBlobs(cache, project.store))
    sel = made.selection if made is not None and trials else None
    others = [t for t in cache.trials_for_job(job.name) if t.group_key != job.group_key]
    ordered = sorted(trials.values(), key=lambda t: (t.median_ms is None, t.median_ms or 0, t.route))
    ex = Explanation(job=job, selection=sel, trials=ordered, lock=entry, decisions=cache.decisions(job.name),
                     signature=job.signature.fields if job.signature else None,
                     other_groups=len({t.group_key for t in others}), decided=decided)
    if sel is not None and made is not None:
        ex.margin, ex.decision = _decision(job, sel, trials, entry)
        ex.decision += made.confirmation
        ex.front = pareto_front(sel, job.objective)
        ex.front_lines = front_lines(sel, job.objective)
        ex.decision += ex.front_lines
        if (busy := busy_summary((t.meta for t in trials.values()), job.measurement.busy)) is not None:
            ex.decision.append(f"Busy host: {busy}.")
        ex.decision += nearest_lines(trials, sel.winner)
        ex.decision += made.search
        if "note" in decided:
            ex.decision.append(f"Note: {decided['note']}.")
    ex.provenance = _provenance(job, trials, sel)
    ex.older = _older_groups(job, others, cache)
    return ex


def _decision(job: Job, sel: Selection, trials: dict[str, TrialRecord],
              entry: LockEntry | None) -> tuple[Margin | None, list[str]]:
    """The decision in words and the margin that backs it."""
    lines = [sel.summary]
    if job.baseline != DEFAULT_ROUTE or job.baseline_choices:
        lines.append(_baseline_line(job, sel, trials))
    default = trials.get(DEFAULT_ROUTE)
    fair = default is not None and default.status == TrialStatus.OK and default.median_ms is not None
    mg: Margin | None = None
    if sel.winner not in (None, DEFAULT_ROUTE) and fair:
        assert default is not None and sel.winner is not None
        win = trials[sel.winner]
        mg = margin(default, win, job.measurement.seed)
        if mg is not None:
            lines.append(f"Margin over the default: {mg.text()}; default {_ms_ci(default)}, "
                         f"winner {_ms_ci(win)}.")
            if not mg.certain and not getattr(sel, "confirmation", None):  # a side-by-side re-measurement decides
                lines.append("The interval includes 1.0x: this gain is within the measured noise.")
    elif sel.winner == DEFAULT_ROUTE and default is not None and default.median_ms is not None:
        lines.extend(_why_default_stayed(job, sel, trials, default))
    elif sel.winner is not None and not fair:
        default_verdict = sel.verdict(DEFAULT_ROUTE)
        lines.append("The default route has no valid measurement "
                     f"({default_verdict.reason if default_verdict else 'not measured'}), "
                     "so there is no margin to compare against.")
    if entry is not None and sel.winner is not None and entry.route != sel.winner:
        lines.append(f"The lock holds {describe(entry.route or '')}, but the trials now select "
                     f"{describe(sel.winner)}: run `trt-routes plan` to see why and `trt-routes apply` to update.")
    return mg, lines


#: Measured routes shown beside a winner of several changes (``nearest_lines``).
NEAREST_SHOWN = 6


def nearest_lines(trials: dict[str, TrialRecord], winner: str | None, shown: int = NEAREST_SHOWN) -> list[str]:
    """What a winner's changes are worth, from the measured routes nearest it: each one's changes against the
    winner's (without some of them, with others) and its median against the winner's, fewest differences first.
    Empty for a winner of one change or none (the margin over the default says it all)."""
    win = trials.get(winner) if winner is not None else None
    if win is None or win.median_ms is None or winner is None or len(assign := route_dict(winner)) < 2:
        return []
    near: list[tuple[int, float, str]] = []
    for t in trials.values():
        if t.route == winner or t.status != TrialStatus.OK or t.median_ms is None:
            continue
        other = route_dict(t.route)
        without = [f"{k}={v}" for k, v in assign.items() if other.get(k) != v]
        extra = [f"{k}={v}" for k, v in other.items() if assign.get(k) != v]
        if len(without) + len(extra) >= len(assign):  # no nearer the winner than the default is
            continue
        parts = [f"without {' '.join(without)}" if without else "", f"with {' '.join(extra)}" if extra else ""]
        near.append((len(without) + len(extra), t.median_ms / win.median_ms, ", ".join(p for p in parts if p)))
    if not near:
        return []
    near.sort(key=lambda n: (n[0], -n[1]))  # fewest differences first, the costliest of them first
    lines = [f"  {what}: {ratio:.3f}x the winner's time" for _, ratio, what in near[:shown]]
    more = f"; {len(near) - shown} more in the trials" if len(near) > shown else ""
    return [f"What the winner's {len(assign)} changes are worth: the measured routes nearest it (ratios of the "
            f"search's medians{more}):", *lines]


def _baseline_line(job: Job, sel: Selection, trials: dict[str, TrialRecord]) -> str:
    """The job's baseline (the route it must beat) and where the winner stands against it."""
    route = sel.baseline if job.baseline_choices else job.baseline  # best of presets: the fastest listed
    base = trials.get(route)
    head = f"Baseline ({job.baseline_source_of(route)}): {describe(route)}"
    if job.baseline_choices:
        def shown(r: str, src: str) -> str:
            v, t = sel.verdict(r), trials.get(r)
            timing = _ms_ci(t) if t is not None and t.median_ms is not None else t.status if t else "not measured"
            return f"{src.removeprefix('preset ')} {timing}" + ("" if v is None or v.eligible else ", not eligible")

        head = f"{head} (the fastest eligible of {len(job.baseline_choices)} presets: " + "; ".join(
            shown(r, src) for r, src in job.baseline_choices) + ")"
    if base is None:
        return head + ": not measured yet."
    if base.status != TrialStatus.OK or base.median_ms is None:
        return head + f": {base.status} ({base.error or 'no timing'}), so nothing could be compared with it."
    speed = sel.baseline_speedup
    how = ("confirmed side by side" if (sel.confirmation or {}).get("vs_baseline") and sel.winner != route
           else "ratio of the search's medians")
    if sel.winner == route:
        return head + f", {_ms_ci(base)}: the baseline itself is the winner."
    return head + f", {_ms_ci(base)}; the winner is " + (f"{speed:.2f}x as fast ({how})." if speed else
                                                          "not comparable with it.")


def _why_default_stayed(job: Job, sel: Selection, trials: dict[str, TrialRecord],
                        default: TrialRecord) -> list[str]:
    faster_bad: list[str] = []
    challenger: TrialRecord | None = None
    for v in sel.verdicts:
        if v.route == DEFAULT_ROUTE:
            continue
        t = trials.get(v.route)
        if t is None:
            continue
        if not v.eligible:
            if t.median_ms is None or t.median_ms < (default.median_ms or 0):
                faster_bad.append(f"{describe(v.route)} ({v.reason})")
        elif t.median_ms is not None and (challenger is None or t.median_ms < (challenger.median_ms or math.inf)):
            challenger = t
    lines = ["Why the default stayed:"]
    if challenger is not None:
        mg = margin(default, challenger, job.measurement.seed)
        lines.append(f"  the fastest eligible challenger in the search, {describe(challenger.route)}, is "
                     + (mg.text() if mg else f"{(default.median_ms or 0) / (challenger.median_ms or 1):.2f}x")
                     + " as fast as the default")
    else:
        lines.append("  no other route was eligible")
    if faster_bad:
        lines.append(f"  {len(faster_bad)} route(s) faster than the default or without a timing were not "
                     "eligible: " + "; ".join(faster_bad))
    return lines


def _ms_ci(t: TrialRecord) -> str:
    ci = f" [{t.ci_low:.3g}-{t.ci_high:.3g}]" if t.ci_low is not None and t.ci_high is not None else ""
    return f"{t.median_ms:.3g} ms{ci}"


def _provenance(job: Job, trials: dict[str, TrialRecord], sel: Selection | None) -> dict[str, Any]:
    """Where the evidence came from: signature, when, which hosts, imported from where."""
    recs = list(trials.values())
    prov: dict[str, Any] = {
        "signature_hash": job.signature.hash if job.signature else None,
        "signature": job.signature.fields if job.signature else None,
        "trials": len(recs),
    }
    if recs:
        stamps = sorted(t.created_at for t in recs)
        prov["measured"] = {"first": stamps[0], "last": stamps[-1]}
        prov["hosts"] = dict(sorted(Counter(t.host or "?" for t in recs).items()))
        prov["sources"] = dict(sorted(Counter(t.source or "local" for t in recs).items()))
        prov["tool_versions"] = sorted({t.tool_version for t in recs if t.tool_version})
    if job.backend == "tensorrt":  # every route is built so; a float32 model is gated against what they allow
        from trt_routes.backends.tensorrt.settings import precision_flags

        prov["precision"] = precision_flags(job.settings)
    win = trials.get(sel.winner) if sel is not None and sel.winner is not None else None
    if win is not None:
        prov["winner_trial"] = {"id": win.id, "created_at": win.created_at, "host": win.host,
                                "source": win.source or "local", "tool_version": win.tool_version,
                                "engine_sha256": win.engine_sha256}
    return prov


def _older_groups(job: Job, others: list[TrialRecord], cache: CacheStore) -> list[dict[str, Any]]:
    """Trials of this job under other keys, newest first, with why they no longer apply."""
    groups: dict[str, list[TrialRecord]] = {}
    for t in others:
        groups.setdefault(t.group_key, []).append(t)
    out = []
    for key, recs in groups.items():
        first = recs[0]
        old = {attr: getattr(first, attr) for attr in job.key_parts()}
        why = stale_reasons(job, old, cache.signature_fields(first.signature))
        if first.backend != job.backend:
            why.append(f"backend {first.backend} -> {job.backend}")
        out.append({"group_key": key, "trials": len(recs), "last": max(t.created_at for t in recs),
                    "changed": why or ["(nothing recorded differs)"]})
    return sorted(out, key=lambda g: g["last"], reverse=True)
