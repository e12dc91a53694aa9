"""A job's final selection: the pure selection over its trials, then confirmation against the job's
baseline (the default route unless ``baseline:`` names another) and against the locked winner (no
churn), from re-measurements stored in the cache.

plan, apply and explain all go through ``final_selection``, so they agree; apply measures what it
reports as missing (``trt_routes.tune.apply``) and asks again."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

from trt_routes.cache import side_tables
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.evidence.facts import batch_of
from trt_routes.jobs import Job
from trt_routes.lockfile import LockEntry
from trt_routes.search.job import selection_key
from trt_routes.selection.confirm import (
    READ_DESIGNS,
    READ_SIZINGS,
    TURNS_RELOAD,
    Remeasurement,
    Request,
    decides,
    remeasure_key,
    resolve,
)
from trt_routes.selection.rank import LossLookup, Selection, select
from trt_routes.selection.sequential import statistic_of


def locked_route(entry: LockEntry | None, job: Job) -> str | None:
    """The route a lock entry holds as its winner, when it was chosen under the job's current selection
    rule (a changed margin or confidence is deliberate: the old winner gets no incumbency)."""
    if entry is None or entry.get("status", "ok") != "ok" or not isinstance(entry.route, str):
        return None
    if (entry.selection.key if entry.selection else None) != selection_key(job):
        return None
    return entry.route


def confirm_statistic(job: Job) -> str:
    """What each side-by-side turn of ``job`` reports (``confirm.statistic_of``): the median, or the tail
    quantile its objective ranks by."""
    return _statistic(job) or "p50"


def _statistic(job: Job) -> str | None:
    """``confirm.statistic_of`` the job's rank fact; None: its objective is not re-measured side by side."""
    return statistic_of(job.objective.rank if job.objective else None)


def confirm_turns(job: Job) -> str:
    """How ``job``'s side-by-side turns load their engines: ``confirm.TURNS_RELOAD`` where its backend loads
    each turn's engine afresh (``Backend.reload_each_turn``), else "" (part of the re-measurement key)."""
    return TURNS_RELOAD if job.reload_each_turn else ""


def stored(cache: CacheStore, job: Job):  # type: ignore[no-untyped-def]
    """The lookup ``confirm.resolve`` takes: re-measurements of this job group from the cache. The rule-free
    record first (whatever margin and confidence it was measured under), when it decides under this rule;
    else the one measured for this rule (``remeasure_key(rule=True)``)."""
    settings = job.strategy.confirm
    statistic = confirm_statistic(job)
    turns = confirm_turns(job)

    def lookup(baseline: str, challengers: tuple[str, ...]) -> Remeasurement | None:
        if settings is None:
            return None
        # the current layout's and sizing's records first, then older ones it reads alike (each key once: with
        # turns not sized, every sizing has the same key)
        keys = {remeasure_key(job.group_key, baseline, challengers, settings, rule=rule, statistic=statistic,
                              turns=turns, design=design, sizing=sizing): rule
                for design, sizing, rule in itertools.product(READ_DESIGNS, READ_SIZINGS, (False, True))}
        for key, rule in keys.items():
            data = side_tables.remeasurement(cache, key, job.group_key)
            if data is None:
                continue
            m = Remeasurement.from_json(data)
            # the rule-free record: measured under another margin or confidence, used where it decides under
            # this one too; the rule's own record: as it is
            if rule or decides(m, settings):
                return m
        return None

    return lookup


def baseline_for(job: Job, sel: Selection) -> str:
    """The route ``job`` must beat: its baseline, or (``baseline: {presets: [...]}``) the fastest eligible
    listed preset by median in the selection (ties: the order listed); none eligible yet: the first listed
    (confirmation then says it is not eligible)."""
    if not job.baseline_choices:
        return job.baseline
    ranked = [(v.median_ms, i, route) for i, route in enumerate(job.baseline_routes)
              if (v := sel.verdict(route)) is not None and v.eligible and v.median_ms is not None]
    return min(ranked)[2] if ranked else job.baseline


def baseline_race(job: Job, sel: Selection) -> list[dict[str, object]]:
    """Each listed preset of ``job`` (``presets:``) with its route, median and eligibility, in the order listed."""
    out: list[dict[str, object]] = []
    for route, source in job.baseline_choices:
        v = sel.verdict(route)
        out.append({"source": source, "route": route, "median_ms": v.median_ms if v is not None else None,
                    "eligible": bool(v is not None and v.eligible)})
    return out


def _with_race(job: Job, sel: Selection, baseline: str) -> Selection:
    """``sel`` with the presets' race recorded: which preset is the baseline and its median (the summary
    says it; the confirmation record, kept in the lock, holds every preset's median)."""
    race = baseline_race(job, sel)
    won = next(r for r in race if r["route"] == baseline)
    ms = won["median_ms"]
    others = ", ".join(f"{r['source'].removeprefix('preset ')} "  # type: ignore[attr-defined]
                       + (f"{r['median_ms']:.4g} ms" if r["eligible"] else "not eligible")
                       for r in race if r["route"] != baseline)
    text = (f"baseline: {won['source']}, {ms:.4g} ms, the fastest eligible of {len(race)} preset(s)"
            if won["eligible"] and isinstance(ms, float) else
            f"baseline: {won['source']} (no listed preset is eligible yet)")
    text += f" (others: {others})" if others else ""
    conf = dict(sel.confirmation) if sel.confirmation is not None else None
    if conf is not None:
        conf["baseline_presets"] = race
        conf["baseline_source"] = won["source"]
    return dataclasses.replace(sel, summary=f"{sel.summary}; {text}" if sel.summary else text,
                               confirmation=conf, baseline=baseline,
                               baseline_ms=ms if won["eligible"] and isinstance(ms, float) else None,
                               baseline_source=str(won["source"]))


def final_selection(job: Job, trials: Mapping[str, TrialRecord], candidates: list[str], cache: CacheStore,
                    entry: LockEntry | None, lookup: LossLookup | None = None,
                    raw: Selection | None = None) -> tuple[Selection, list[Request]]:
    """(selection after confirmation, re-measurements still missing). ``raw``: the pure selection if
    the caller has it already. With ``baseline: {presets: [...]}`` the baseline is the fastest eligible
    listed preset (``baseline_for``), decided before confirmation, which then compares against it."""
    sel = raw if raw is not None else select_for_job(job, trials, candidates, lookup)
    baseline = baseline_for(job, sel)
    sel, requests = _final_selection(job, sel, cache, entry, baseline)
    return (_with_race(job, sel, baseline) if job.baseline_choices else sel), requests


def _final_selection(job: Job, sel: Selection, cache: CacheStore, entry: LockEntry | None,
                     baseline: str) -> tuple[Selection, list[Request]]:
    if _statistic(job) is None and sel.winner is not None:
        # confirmation re-measures timings side by side; an objective ranking by another fact decides alone
        rank = job.objective.rank if job.objective else ""
        why = ("energy counters tick too coarsely to read one side-by-side turn" if rank.startswith("energy")
               else f"{rank} is not timing noise: re-measuring it would read the same value")
        note = (f"not confirmed side by side: objective '{job.objective_name}' ranks by {rank}, and {why}; "
                "the objective decides from the trials' stored facts")
        sel, _ = resolve(sel, None, None, stored(cache, job), job.measurement.seed, baseline=baseline)
        return dataclasses.replace(sel, confirmation={"note": note}), []
    return resolve(sel, job.strategy.confirm, locked_route(entry, job), stored(cache, job), job.measurement.seed,
                   baseline=baseline, rank=job.objective.rank if job.objective else None)


def select_for_job(job: Job, trials: Mapping[str, TrialRecord], candidates: list[str],
                   lookup: LossLookup | None = None) -> Selection:
    """The pure selection under the job's tolerance and objective (none: the lowest median)."""
    return select(trials, candidates, job.tolerance, lookup, job.objective, job.objective_name,
                  batch_of(job.inputs))


def describe_requests(requests: list[Request]) -> str:
    from trt_routes.routes import describe

    parts = [f"{len(r.challengers)} route(s) against {describe(r.baseline)}" for r in requests]
    return "confirm side by side (measurements, no builds): " + "; ".join(parts)


def load_text(load: Any) -> str | None:
    """A decision's recorded load in words (None: not recorded)."""
    if not isinstance(load, dict) or not isinstance(load.get("cpu_busy_others"), (int, float)):
        return None
    extra = (f", load {load['loadavg']:g} on {load['cpu_count']:g} CPUs"
             if isinstance(load.get("loadavg"), (int, float)) and load.get("cpu_count") else "")
    return f"other processes kept {load['cpu_busy_others']:.0%} of the CPUs busy{extra}"


def confirmation_lines(sel: Selection, pending: list[Request]) -> list[str]:
    """The side-by-side confirmation in words, for explain."""
    from trt_routes.routes import describe

    if pending:
        return [f"Side-by-side confirmation pending ({describe_requests(pending)}): run `trt-routes apply`."]
    data = sel.confirmation
    if not data:
        return []
    if "note" in data:
        return [f"Confirmation: {data['note']}."]
    lines = [f"Confirmation rule: a route must take less than {1 - data['margin']:.2f}x the baseline's time "
             f"side by side, with the upper end of its interval below 1.0x ({data['rounds']} interleaved rounds; "
             f"each turn at least {data.get('turn_runs', data['iterations'])} runs and {data.get('slot_ms', 0):g} ms"
             + (f", sized to the baseline's noise up to {data['max_slot_ms']:g} ms" if data.get("max_slot_ms") else "")
             + ")."]
    if data.get("statistic"):
        lines.append(f"Each turn reports its {data['statistic']} latency, the objective's rank, over at least "
                     f"{data['turn_runs']} runs, so that 10 runs or more lie above it; the ratios compare those.")
    if data.get("baseline"):
        lines.append(f"Baseline (the route to beat): {describe(data['baseline'])}.")
    for part, title in (("vs_default", "against the default route"), ("vs_baseline", "against the baseline"),
                        ("vs_locked", "against the locked winner")):
        block = data.get(part)
        if block:
            lines.append(f"Re-measured {title}:")
            lines += [f"  {describe(r['route'])}: {r['reason']}" for r in block["results"]]
            if (load := load_text(block.get("load"))) is not None:
                lines.append(f"  host while measured side by side: {load}")
    return lines
