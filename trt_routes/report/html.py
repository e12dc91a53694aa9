"""The HTML report: one self-contained file (inline CSS, SVG and JS; nothing fetched) with a
summary of every job and, per job, latency against accuracy loss and the effect of each knob value.

``collect`` reads the project (lock + cache) into a Report; ``render`` lays it out; the CLI only
calls ``write_report``."""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trt_routes import __version__
from trt_routes.audit.explain import Explanation, explain_job
from trt_routes.cache.store import TrialRecord
from trt_routes.errors import RouteError
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.facts import UNITS
from trt_routes.files.artifacts import atomic_write_text
from trt_routes.jobs import Job
from trt_routes.lockfile import LockEntry, LockTiming
from trt_routes.manifest.schema import Tolerance
from trt_routes.project import LossLookupFromBlobs, Project
from trt_routes.report.html_assets import CSS, JS
from trt_routes.report.svg import Bar, Effect, Point, esc, fmt_ms, knob_effects, scatter, speedup_bars
from trt_routes.routes import describe, route_dict
from trt_routes.selection.rank import DEFAULT_ROUTE, LossLookup


@dataclass
class JobReport:
    job: Job
    state: str  # tuned | default | unlocked | no-trials | blocked
    note: str
    ex: Explanation | None = None
    points: list[Point] = field(default_factory=list)
    unplotted: list[tuple[str, str]] = field(default_factory=list)  # (route, reason)
    effects: list[Effect] = field(default_factory=list)
    bar: Bar | None = None
    layers: list[Effect] = field(default_factory=list)  # the largest per-layer differences, default -> winner
    layers_of: str = ""  # the route compared with the default

    @property
    def anchor(self) -> str:
        return "job-" + re.sub(r"[^A-Za-z0-9_-]+", "-", self.job.name).strip("-")


@dataclass
class Report:
    manifest: str
    generated: str
    jobs: list[JobReport]
    orphans: list[str] = field(default_factory=list)


def worst_loss(trial: TrialRecord, tolerance: Tolerance, lookup: LossLookup | None = None) -> tuple[float, str]:
    """The largest loss/threshold ratio over the job's checks (>= 1 fails the gate) and which check."""
    worst, which = 0.0, ""
    for output in sorted(trial.losses):
        for check in tolerance.checks_for(output):
            value = trial.losses[output].get(check.key)
            if value is None and lookup is not None:
                value = lookup(trial, output, check)
            if value is None:
                continue
            if not math.isfinite(value):
                ratio = math.inf
            elif check.threshold > 0:
                ratio = value / check.threshold
            else:
                ratio = math.inf if value > 0 else 1.0
            if ratio >= worst:
                worst, which = ratio, f"{output} {check.key}"
    return worst, which


def effects(trials: dict[str, TrialRecord], eligible: set[str]) -> list[Effect]:
    """Per knob value: the median latency change against the same route without that value (the
    default route for one-knob routes), and how often routes with it failed."""
    changes: dict[tuple[str, str], list[float]] = {}
    failures: dict[tuple[str, str], Counter[str]] = {}
    for route, t in trials.items():
        if route == DEFAULT_ROUTE:
            continue
        try:
            assign = route_dict(route)
        except RouteError:
            continue
        for knob, value in assign.items():
            key = (knob, value)
            changes.setdefault(key, [])
            fails = failures.setdefault(key, Counter())
            if t.status != TrialStatus.OK or t.median_ms is None:
                fails[t.status] += 1
                continue
            if route not in eligible:
                fails["failed gate"] += 1
            pair = trials.get(" ".join(f"{k}={v}" for k, v in sorted(assign.items()) if k != knob))
            if pair is not None and pair.status == TrialStatus.OK and pair.median_ms:
                changes[key].append(t.median_ms / pair.median_ms - 1.0)
    out = []
    for knob, value in sorted(changes):
        xs = changes[(knob, value)]
        note = ", ".join(f"{n} {s}" for s, n in sorted(failures[(knob, value)].items()))
        med = statistics.median(xs) if xs else None
        title = f"{knob}={value}: " + (
            f"median change {med * 100:+.1f}% over {len(xs)} pair(s) (range {min(xs) * 100:+.1f}% .. "
            f"{max(xs) * 100:+.1f}%)" if med is not None else "no timed pair") + (f"; {note}" if note else "")
        out.append(Effect(f"{knob}={value}", med, len(xs), note, title))
    return out


def _point(t: TrialRecord, ex: Explanation, tolerance: Tolerance, lookup: LossLookup) -> Point:
    sel = ex.selection
    v = sel.verdict(t.route) if sel else None
    loss, which = worst_loss(t, tolerance, lookup)
    ci = f" [{fmt_ms(t.ci_low)}-{fmt_ms(t.ci_high)}]" if t.ci_low is not None and t.ci_high is not None else ""
    losses = "; ".join(f"{o}: " + ", ".join(f"{k}={x:.3g}" for k, x in sorted(vals.items()) if not k.startswith("l0@"))
                       for o, vals in sorted(t.losses.items()))
    title = (f"{describe(t.route)}\nmedian {fmt_ms(t.median_ms or 0)} ms{ci}\n"
             f"worst loss/threshold {loss:.3g} ({which or 'no checks'})\n{losses}\n{ex.verdict(t.route)}")
    return Point(describe(t.route), t.median_ms or 0.0, t.ci_low, t.ci_high, loss,
                 eligible=bool(v and v.eligible), winner=bool(sel and sel.winner == t.route),
                 default=t.route == DEFAULT_ROUTE, title=title, candidate=v is not None)


def job_report(project: Project, job: Job, ex: Explanation, lookup: LossLookup) -> JobReport:
    sel, lock = ex.selection, ex.lock
    if job.blocked:
        return JobReport(job, "blocked", job.blocked, ex, bar=Bar(job.name, None, note="blocked here",
                                                                   kind="none"))
    if sel is None or not ex.trials:
        note = "no trials under the current signature" + (
            f" ({ex.other_groups} older group(s))" if ex.other_groups else "") + ": run `trt-routes apply`"
        return JobReport(job, "no-trials", note, ex, bar=Bar(job.name, None, note="not tuned", kind="none"))
    trials = {t.route: t for t in ex.trials}
    rep = JobReport(job, "tuned", sel.summary, ex)
    for t in ex.trials:
        if t.median_ms is None:
            rep.unplotted.append((describe(t.route), ex.verdict(t.route)))
        else:
            rep.points.append(_point(t, ex, job.tolerance, lookup))
    rep.effects = effects(trials, {v.route for v in sel.verdicts if v.eligible})
    rep.layers, rep.layers_of = _layers(project, trials, ex)
    mg = ex.margin
    if lock is None:
        rep.state, rep.note = "unlocked", f"{sel.summary}; not locked yet: run `trt-routes apply`"
    elif sel.winner == DEFAULT_ROUTE:
        rep.state = "default"
    speed = lock.timing.speedup if lock and lock.timing else None
    speed = speed if speed is not None else sel.speedup
    locked_route = lock.route if lock else sel.winner
    if speed is None:
        rep.bar = Bar(job.name, None, note=sel.summary[:60], kind="none", anchor=rep.anchor)
    else:
        kind = "default" if locked_route == DEFAULT_ROUTE else "tuned"
        note = "default kept" if kind == "default" else describe(locked_route or "")
        if rep.state == "unlocked":
            note += " (not locked)"
        confirmed_ci = lock.timing.speedup_ci if lock is not None and lock.timing is not None else None
        if confirmed_ci and len(confirmed_ci) == 2:  # the side-by-side interval of the headline speedup
            low, high = confirmed_ci
        elif mg is not None and mg.route == locked_route:
            low, high = mg.low, mg.high
            note += " (raw medians)"
        else:
            low = high = None
        rep.bar = Bar(job.name, speed, low, high, kind, note, rep.anchor)
    return rep


def _layers(project: Project, trials: dict[str, TrialRecord], ex: Explanation) -> tuple[list[Effect], str]:
    """The ten largest per-layer differences between the default and the route ``explain --layers`` compares
    with it, where both have a stored profile (explain --layers takes them; the report takes none), as shares
    of the default's layer time."""
    from trt_routes.audit.layers import compared_route, stored_profile
    from trt_routes.errors import UsageError
    from trt_routes.evidence.layers import compare

    try:
        winner = compared_route(ex)[0]
    except UsageError:
        return [], ""
    if DEFAULT_ROUTE not in trials or winner not in trials:
        return [], ""
    default, other = stored_profile(project, trials[DEFAULT_ROUTE]), stored_profile(project, trials[winner])
    if default is None or other is None or default.total_ms <= 0:
        return [], ""
    diff = compare(default, other)
    rows = [Effect(r.name + ("" if r.paired_by else " (only in one)"),
                   ((r.winner_ms or 0.0) - (r.default_ms or 0.0)) / default.total_ms, 1, r.op,
                   f"{r.name} ({r.op}): {r.default_ms or 0:.3f} -> {r.winner_ms or 0:.3f} ms"
                   + (f", ran on {r.default_where} -> {r.winner_where}" if r.moved else ""))
            for r in diff.largest(10)]
    return rows, winner


def collect(project: Project) -> Report:
    """Everything the report shows, read from the lockfile and the trial cache (nothing is written)."""
    lock = project.read_lock()
    with project.read_cache() as cache:
        lookup = LossLookupFromBlobs(cache, project.store)
        jobs = [job_report(project, job, explain_job(project, job, cache, lock), lookup) for job in project.jobs]
    names = {j.name for j in project.jobs}
    return Report(manifest=project.rel(project.loaded.path),
                  generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), jobs=jobs,
                  orphans=sorted(set(lock.jobs) - names))


# -- rendering ------------------------------------------------------------------------------------

def _tolerance(job: Job) -> str:
    text = ", ".join(f"{c.metric} &lt; {c.threshold:g}" for c in job.tolerance.checks)
    for out, checks in sorted(job.tolerance.outputs.items()):
        text += f"; {esc(out)}: " + ", ".join(f"{c.metric} &lt; {c.threshold:g}" for c in checks)
    return text


def _badge(rep: JobReport) -> str:
    bar = rep.bar
    if rep.state in ("blocked", "no-trials") or bar is None or bar.value is None:
        return f'<span class="badge none">{esc(rep.state)}</span>'
    return f'<span class="badge {bar.kind}">{bar.value:.2f}x</span>'


def _summary_table(report: Report) -> str:
    rows = []
    for rep in report.jobs:
        sel = rep.ex.selection if rep.ex else None
        lock = rep.ex.lock if rep.ex else None
        route = lock.route if lock is not None and "route" in lock else (sel.winner if sel else None)
        timing = lock.timing if lock is not None and lock.timing is not None else LockTiming()
        default_ms = timing.default_ms if "default_ms" in timing else (sel.default_ms if sel else None)
        chosen_ms = timing.chosen_ms if "chosen_ms" in timing else (sel.chosen_ms if sel else None)
        rows.append(
            f'<tr class="{esc(rep.state)}"><td><a href="#{rep.anchor}">{esc(rep.job.name)}</a></td>'
            f"<td>{_badge(rep)}</td><td><code>{esc(describe(route)) if route is not None else '-'}</code></td>"
            f"<td class=num>{fmt_ms(default_ms) if default_ms else '-'}</td>"
            f"<td class=num>{fmt_ms(chosen_ms) if chosen_ms else '-'}</td>"
            f"<td class=num>{len(rep.ex.trials) if rep.ex else 0}</td><td>{esc(rep.note)}</td></tr>")
    return ('<table class="summary"><thead><tr><th>job</th><th>speedup</th><th>locked route</th>'
            "<th>default ms</th><th>chosen ms</th><th>trials</th><th>decision</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _trials_table(rep: JobReport) -> str:
    ex = rep.ex
    assert ex is not None and ex.selection is not None
    rows = []
    for t in ex.trials:
        winner = t.route == ex.selection.winner
        loss = worst_loss(t, rep.job.tolerance)[0] if t.losses else None
        ci = f"{fmt_ms(t.ci_low)}-{fmt_ms(t.ci_high)}" if t.ci_low is not None and t.ci_high is not None else "-"
        v = ex.selection.verdict(t.route)
        cls = "winner" if winner else ("ok" if v and v.eligible else "failed")
        rows.append(
            f'<tr class="{cls}" data-route="{esc(describe(t.route))}"><td><code>{esc(describe(t.route))}</code>'
            f"{' <b class=mark>winner</b>' if winner else ''}</td><td>{esc(t.status)}</td>"
            f"<td class=num>{fmt_ms(t.median_ms) if t.median_ms else '-'}</td><td class=num>{ci}</td>"
            f"<td class=num>{f'{loss:.3g}' if loss is not None else '-'}</td>"
            f"<td class=num>{f'{t.build_s:.2f}' if t.build_s is not None else '-'}</td>"
            f"<td>{esc(ex.verdict(t.route))}</td></tr>")
    return ("<details><summary>All " + str(len(ex.trials)) + " trials</summary><table class=trials><thead><tr>"
            "<th>route</th><th>status</th><th>median ms</th><th>95% CI</th><th>loss / threshold</th>"
            "<th>build s</th><th>verdict</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></details>")


def _ratio(value: Any) -> str:
    return f"{value:.3g}x" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def _confirmation(lock: LockEntry | None) -> str:
    """The lock's side-by-side confirmation of the job's winner: per challenger its time ratio to the
    baseline (the default route, then the locked winner) with its interval and the verdict."""
    data = (lock.selection.confirmation if lock is not None and lock.selection is not None else None) or {}
    if not data:
        return ""
    head = '<div class="confirmation"><h3>Side-by-side confirmation (tuning.lock)</h3>'
    if "note" in data:
        return head + f'<p class="note">{esc(str(data["note"]))}</p></div>'
    rule = ""
    if isinstance(data.get("margin"), (int, float)):
        rule = (f'<p class="note">A route wins when it takes less than {_ratio(1 - data["margin"])} the '
                f"baseline's time side by side and its {data.get('confidence', 0.95):.0%} interval ends below "
                f"1x ({esc(str(data.get('rounds', '?')))} interleaved rounds).</p>")
    rows = []
    for part, title in (("vs_default", "default route"), ("vs_locked", "locked winner")):
        block = data.get(part) or {}
        for r in block.get("results") or []:
            ci = r.get("ci") or []
            interval = f"{_ratio(ci[0])}-{_ratio(ci[1])}" if len(ci) == 2 else "-"
            passed = bool(r.get("passed"))
            rows.append(
                f'<tr class="{"ok" if passed else "failed"}" data-route="{esc(describe(str(r.get("route", ""))))}">'
                f"<td>{title} <code>{esc(describe(str(block.get('baseline', ''))))}</code></td>"
                f"<td><code>{esc(describe(str(r.get('route', ''))))}</code></td>"
                f"<td class=num>{_ratio(r.get('ratio'))}</td><td class=num>{interval}</td>"
                f"<td class=num>{esc(str(r.get('rounds', '-')))}</td>"
                f"<td>{'confirmed' if passed else 'not confirmed'}</td></tr>")
    table = ("<table class=confirm><thead><tr><th>against</th><th>challenger</th><th>time ratio</th>"
             "<th>interval</th><th>rounds</th><th>verdict</th></tr></thead><tbody>" + "".join(rows)
             + "</tbody></table>") if rows else ""
    return head + rule + table + "</div>"


def _pareto(ex: Explanation) -> str:
    """The job's objective and the Pareto front of its eligible routes over the objective's facts: every
    eligible route's facts on the front's axes, the winner, and why each dominated route lost."""
    front, sel = ex.front, ex.selection
    if front is None or sel is None or not front.axes:
        return ""
    objective = ex.job.objective
    said = (f"objective <b>{esc(ex.job.objective_name)}</b>: rank by {esc(objective.rank)}"
            + "".join(f", {esc(k)} &le; {v:g}" for k, v in sorted(objective.limits.items()))
            if objective is not None else "no objective: the lowest latency.p50 wins")
    by_route = {v.route: v for v in sel.verdicts}
    rows = []
    for route in [*front.front, *front.dominated]:
        v = by_route[route]
        winner = route == sel.winner
        verdict = "on the front" if route in front.front else front.dominated[route][1]
        cells = "".join(f"<td class=num>{v.facts[a]:.3g}</td>" for a in front.axes)
        rows.append(f'<tr class="{"winner" if winner else "ok" if route in front.front else "failed"}" '
                    f'data-route="{esc(describe(route))}"><td><code>{esc(describe(route))}</code>'
                    f"{' <b class=mark>winner</b>' if winner else ''}</td>{cells}<td>{esc(verdict)}</td></tr>")
    heads = "".join(f"<th>{esc(a)} ({esc(UNITS[a])})</th>" for a in front.axes)
    return (f'<div class="pareto"><h3>Pareto front of the eligible routes</h3><p class="note">{said}</p>'
            f"<table class=pareto><thead><tr><th>route</th>{heads}<th>front</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>")


def _legend(points: list[Point]) -> str:
    other = ('<span><i class="dot other"></i>not a candidate now</span>'
             if any(not p.candidate for p in points) else "")
    return ('<div class="legend"><span><i class="dot eligible"></i>eligible</span>'
            '<span><i class="dot failed"></i>not eligible (gate, crash)</span>'
            '<span><i class="sq"></i>default route</span><span><i class="dot winner"></i>winner</span>'
            f'{other}<span><i class="thr"></i>accuracy threshold</span></div>')


def _job_section(rep: JobReport) -> str:
    job = rep.job
    head = (f'<section class="job {esc(rep.state)}" id="{rep.anchor}"><h2>{esc(job.name)} {_badge(rep)}</h2>'
            f'<p class="meta">{esc(job.backend)} on {esc(job.target)} · strategy {esc(job.strategy_name)} '
            f"({esc(job.strategy.mode)}) · switch group {esc(job.switch_group)} · tolerance "
            f"{esc(job.tolerance_name)}: {_tolerance(job)}</p>")
    if rep.state in ("blocked", "no-trials"):
        return head + f'<p class="note">{esc(rep.note)}</p>{_confirmation(rep.ex.lock if rep.ex else None)}</section>'
    ex = rep.ex
    assert ex is not None
    decision = "".join(f"<li>{esc(line.strip())}</li>" for line in ex.decision if line not in ex.front_lines)
    charts = (f'<div class="charts"><figure><figcaption>Latency against accuracy loss</figcaption>'
              f"{scatter(rep.points)}{_legend(rep.points)}</figure>"
              f"<figure><figcaption>Effect of each knob value</figcaption>"
              f"{knob_effects(rep.effects) if rep.effects else '<p class=note>only the default route was built</p>'}"
              "</figure>" + _layers_figure(rep) + "</div>")
    unplotted = ""
    if rep.unplotted:
        unplotted = ('<p class="unplotted">Not plotted (no timing): '
                     + "; ".join(f"<code>{esc(r)}</code>: {esc(why)}" for r, why in rep.unplotted) + "</p>")
    return (head + f'<ul class="decision">{decision}</ul>' + _confirmation(ex.lock) + _pareto(ex) + charts + unplotted
            + _trials_table(rep) + "</section>")


def _layers_figure(rep: JobReport) -> str:
    if not rep.layers:
        return ""
    chart = knob_effects(rep.layers, caption="per-layer time change, as a share of the default's layer time",
                         label=f"where the gain of {describe(rep.layers_of)} comes from, layer by layer",
                         kind="effects layers")
    return (f'<figure class="layers"><figcaption>Where the gain comes from: default against '
            f"<code>{esc(describe(rep.layers_of))}</code>, the largest per-layer changes</figcaption>{chart}</figure>")


def render(report: Report) -> str:
    bars = [r.bar for r in report.jobs if r.bar is not None]
    tuned = sum(1 for r in report.jobs if r.state in ("tuned", "default", "unlocked"))
    orphans = (f'<p class="note">In the lockfile but no longer in the manifest: {esc(", ".join(report.orphans))}'
               "</p>" if report.orphans else "")
    nav = "".join(f'<a href="#{r.anchor}">{esc(r.job.name)}</a>' for r in report.jobs)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>trt-routes report: {esc(report.manifest)}</title><style>{CSS}</style></head>"
        f'<body data-rendered="no"><header><h1>trt-routes report</h1><p class="meta">{esc(report.manifest)} · '
        f"{len(report.jobs)} job(s), {tuned} with trials · generated {esc(report.generated)} by trt-routes "
        f"{esc(__version__)}</p><nav>{nav}</nav></header><main>"
        f'<section class="overview"><h2>Summary</h2>{speedup_bars(bars) if bars else ""}'
        f"{_summary_table(report)}{orphans}</section>"
        + "".join(_job_section(r) for r in report.jobs)
        + f"</main><script>{JS}</script></body></html>\n"
    )


def build_report(project: Project) -> str:
    return render(collect(project))


def write_report(project: Project, path: Path) -> Report:
    """Write the report to ``path`` atomically; returns what it shows."""
    report = collect(project)
    atomic_write_text(Path(path), render(report))
    return report


def report_json(report: Report) -> dict[str, Any]:
    return {"manifest": report.manifest, "jobs": [
        {"job": r.job.name, "state": r.state, "note": r.note, "points": len(r.points),
         "speedup": r.bar.value if r.bar else None} for r in report.jobs]}
