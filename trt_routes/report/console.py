"""Renderers for plan, apply progress and summary, explain, status and knobs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from trt_routes.cache.store import TrialRecord
from trt_routes.catalog import Catalog
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.inputs import STDERR_HEADER
from trt_routes.jobs import Job, PlanAction
from trt_routes.lockfile import LockEntry, LockTiming
from trt_routes.plan.diff import Plan
from trt_routes.report.progress import EtaColumn, TrialClock, clock_text
from trt_routes.routes import count_text, describe
from trt_routes.selection.rank import gate
from trt_routes.tune.outcome import ApplyResult, JobOutcome

if TYPE_CHECKING:  # annotations only: plan and apply render without importing explain and status (~60 ms)
    from trt_routes.audit.explain import Explanation
    from trt_routes.audit.status import JobStatus

ACTION_STYLE = {PlanAction.UP_TO_DATE: "green", PlanAction.TUNE: "yellow", PlanAction.RESELECT: "cyan",
                PlanAction.MATERIALIZE: "cyan", PlanAction.BLOCKED: "red", PlanAction.SKIPPED: "dim"}


def ms(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3f}"


def shorten(text: str, width: int = 120) -> str:
    """``text`` on one line, cut at a word boundary to at most ``width`` characters with an ellipsis (the
    whole text stays in the cache: `trt-routes explain JOB` shows it)."""
    line = " ".join(text.split())
    if len(line) <= width:
        return line
    cut = line[:width - 1]
    space = width - 1 if line[width - 1] == " " else cut.rfind(" ")  # the cut may fall right after a word
    return (cut[:space] if space > width // 2 else cut).rstrip(" ,;:") + "…"


def backend_stderr(log: str) -> list[str]:
    """The lines the worker captured from the backend's stderr at the end of a trial's log (if any)."""
    _, found, text = log.rpartition(STDERR_HEADER)
    return [line for line in text.splitlines() if line.strip()] if found else []


def loss_text(losses: dict[str, dict[str, float]], keys: list[str] | None = None) -> str:
    parts = []
    for out in sorted(losses):
        vals = losses[out]
        shown = [k for k in (keys or ["cos", "lInf"]) if k in vals]
        parts.append(f"{out}: " + " ".join(f"{k}={vals[k]:.2g}" for k in shown))
    return "; ".join(parts) or "-"


#: Up to this many up-to-date jobs get a row each in the plan and summary tables; more are one row (as
#: Terraform and DVC show only what changes; `plan --json` and `status` list every job).
FOLD_UP_TO_DATE = 12


def folded(count: int) -> str:
    return f"({count} jobs)"


#: A route's knob (``-graph_optimization_level=extended``) is kept on one line up to this width.
TOKEN_WIDTH = 40


def add_columns(table: Table, cols: tuple[str, ...], routes: dict[str, list[str]] | None = None) -> None:
    """Columns that wrap at spaces; a ``job`` column never wraps (a narrow terminal wraps the others first), and
    a route column is at least as wide as its longest knob (``routes``: column -> the routes shown), so neither
    is split mid-word at 80 columns."""
    for col in cols:
        tokens = [t for r in (routes or {}).get(col, []) for t in r.split()]
        table.add_column(col, overflow="fold", no_wrap=col == "job",
                         min_width=min(TOKEN_WIDTH, max(map(len, tokens))) if tokens else None)


def render_plan(plan: Plan, console: Console) -> None:
    table = Table(title="Plan", title_justify="left", show_lines=False)
    add_columns(table, ("job", "action", "builds", "reused", "reason"))
    fresh = [jp for jp in plan.jobs if jp.action == PlanAction.UP_TO_DATE]
    fold = len(fresh) > FOLD_UP_TO_DATE
    for jp in plan.jobs:
        if fold and jp.action == PlanAction.UP_TO_DATE:
            continue
        table.add_row(jp.job.name, f"[{ACTION_STYLE.get(jp.action, '')}]{jp.action}[/]",
                      str(len(jp.to_build)), str(jp.reused), escape("\n".join(jp.reasons)))
    if fold:
        table.add_row(folded(len(fresh)), f"[{ACTION_STYLE[PlanAction.UP_TO_DATE]}]up-to-date[/]", "0",
                      str(sum(jp.reused for jp in fresh)),
                      "up to date (`trt-routes plan --json` or `trt-routes status` lists each)")
    for name in plan.removed:
        table.add_row(name, "[magenta]remove[/]", "0", "0", "no longer in the manifest: drop its lock entry")
    console.print(table)
    if plan.blocked:
        console.print(f"{len(plan.blocked)} job(s) blocked here, not up to date: "
                      f"{escape(', '.join(jp.job.name for jp in plan.blocked))}.")
    skipped = [jp for jp in plan.jobs if jp.action == PlanAction.SKIPPED]
    if skipped:
        console.print(f"{len(skipped)} job(s) skipped: their target's hardware is not here (another machine runs "
                      "them).")
    if not plan.has_work:
        others = len(plan.jobs) - len(plan.blocked) - len(skipped)
        console.print("Nothing to do: every job is up to date." if not (plan.blocked or skipped) else
                      "Nothing to do here: every other job is up to date." if others else "Nothing to do here.")
    elif plan.at_most > plan.builds:
        console.print(f"{plan.builds} build(s) to run now; the searches may add more, "
                      f"at most {count_text(plan.at_most)} in all.")
    else:
        console.print(f"{plan.builds} build(s) to run now.")
    if plan.engines_gone:
        console.print(f"{plan.engines_gone} winner engine(s) missing from the blob store: apply fetches them from a "
                      "cache remote or builds them again.")


def render_dry_run(plan: Plan, console: Console) -> None:
    for jp in plan.jobs:
        if not jp.to_build:
            continue
        console.print(f"{jp.job.name}: {len(jp.to_build)} route(s) to build")
        for route in jp.to_build:
            console.print(f"  {describe(route)}", markup=False)
        if jp.pending:
            console.print(f"  (+ {jp.pending})", markup=False)


def summary_table(result: ApplyResult) -> Table:
    table = Table(title="Summary", title_justify="left")
    # jobs with a baseline (``baseline:``) also show it and the winner's speedup over it
    named = any(o.lock_entry is not None and o.lock_entry.timing is not None and o.lock_entry.timing.baseline
                for o in result.outcomes)
    cols = ("job", "default ms", "chosen ms", "speedup", *(("baseline ms", "vs baseline") if named else ()),
            "chosen route", "built", "reused", "note")
    add_columns(table, cols, {"chosen route": [o.lock_entry.route or "" for o in result.outcomes
                                               if o.lock_entry is not None]})
    fresh = [o for o in result.outcomes if o.action == PlanAction.UP_TO_DATE and not o.error]
    fold = len(fresh) > FOLD_UP_TO_DATE
    for o in result.outcomes:
        if fold and o.action == PlanAction.UP_TO_DATE and not o.error:
            continue
        entry = o.lock_entry or LockEntry()
        timing = entry.timing or LockTiming()
        vs_base = timing.baseline_speedup
        extra = ((ms(timing.baseline_ms) if timing.baseline else "-", f"{vs_base:.2f}x" if vs_base else "-")
                 if named else ())
        speed = timing.speedup
        trials = entry.trials
        built = o.built if o.action != PlanAction.UP_TO_DATE else 0
        reused = o.reused if o.action != PlanAction.UP_TO_DATE else (
            trials.candidates if trials is not None and "candidates" in trials else 0)
        note = o.error or ("up to date" if o.action == PlanAction.UP_TO_DATE else o.action)
        table.add_row(o.job.name, ms(timing.default_ms), ms(timing.chosen_ms),
                      (f"{speed:.2f}x" + (" raw" if timing.speedup_basis == "raw-medians" else "")) if speed
                      else "-", *extra,
                      describe(entry.route or "") if "route" in entry else "-", str(built), str(reused),
                      f"[red]{escape(note)}[/]" if o.error else escape(note))
    if fold:
        table.add_row(folded(len(fresh)), "-", "-", "-", *(("-", "-") if named else ()), "-", "0", "-",
                      "up to date (`trt-routes status` shows each one's route and speedup)")
    for jp in result.plan.jobs:
        if jp.action in (PlanAction.BLOCKED, PlanAction.SKIPPED):
            table.add_row(jp.job.name, "-", "-", "-", *(("-", "-") if named else ()), "-", "0", "0",
                          f"[{ACTION_STYLE[jp.action]}]{jp.action}: {escape(jp.reasons[0])}[/]")
    return table


def render_summary(result: ApplyResult, console: Console) -> None:
    console.print(summary_table(result))
    if result.built == 0 and not any(o.error for o in result.outcomes) and not result.plan.blocked and \
            all(o.action == PlanAction.UP_TO_DATE for o in result.outcomes):
        skipped = sum(1 for jp in result.plan.jobs if jp.action == PlanAction.SKIPPED)
        console.print(f"Nothing was built: {skipped} job(s) skipped here, every other job is up to date." if skipped
                      else "Every job is up to date; nothing was built.")
    else:
        console.print(f"Built {result.built} trial(s); lockfile "
                      f"{'written' if result.lock_written else 'unchanged'}.")
    if any(o.lock_entry is not None and o.lock_entry.timing is not None
           and o.lock_entry.timing.speedup_basis == "side-by-side" for o in result.outcomes):
        console.print("speedup: the side-by-side ratio (interleaved rounds in one worker), which the two medians "
                      "beside it (from separate trials) need not give; 'raw': the ratio of those medians.")
    if result.plan.blocked:
        console.print(f"{len(result.plan.blocked)} job(s) blocked here, not up to date: "
                      f"{escape(', '.join(jp.job.name for jp in result.plan.blocked))}.")


class PlainReporter:
    """One line per event: for logs and CI."""

    def __init__(self, console: Console, verbose: bool = False, quiet: bool = False,
                 err: Console | None = None) -> None:
        self.console = console
        self.err = err if err is not None else console  # warnings and failures (the CLI: stderr)
        self.verbose = verbose
        self.quiet = quiet
        self.done = 0
        self.total = 0
        self.at_most = 0
        self.clock = TrialClock()

    def plan(self, plan: Plan) -> None:
        self.total = plan.builds
        self.at_most = plan.at_most
        self.clock.plan({jp.job.name: len(jp.to_build) for jp in plan.jobs},
                        {jp.job.name: jp.job.strategy.max_minutes * 60 for jp in plan.jobs
                         if jp.job.strategy.max_minutes})
        if not self.quiet:
            render_plan(plan, self.console)

    def job_start(self, job: Job, builds: int) -> None:
        self.clock.job_start(job.name, builds)
        if not self.quiet:
            self.console.print(f"tuning {job.name}: {builds} build(s)", markup=False, highlight=False)

    def trial_done(self, job: Job, trial: TrialRecord) -> None:
        self.done += 1
        seconds = self.clock.trial_done(job.name)
        if self.quiet:
            return
        status = str(trial.status)
        extra = f" {ms(trial.median_ms)} ms" if trial.status == TrialStatus.OK else f" {shorten(trial.error)}"
        failed = [f for f in gate(trial, job.tolerance) if not f.endswith("not measured")] \
            if trial.status == TrialStatus.OK else []
        if failed:
            # built and timed, but the accuracy gate refuses it: say so, with the check that failed
            status = f"accuracy-failed ({shorten(failed[0].split(': ', 1)[-1])}" + (
                f"; +{len(failed) - 1} more)" if len(failed) > 1 else ")")
        took = f" in {seconds:.1f} s" if seconds is not None else ""
        # a search may add builds: count against its bound, never a total that moves
        count = (f"{self.done} of at most {count_text(max(self.at_most, self.done))}" if self.at_most > self.total
                 else f"{self.done}/{self.total}" if self.done <= self.total
                 else str(self.done))  # builds no plan counted (apply --frozen builds the locked routes)
        self.console.print(f"  [{count}] {job.name} "
                           f"{describe(trial.route)}: {status}{extra}{took}, "
                           f"eta {clock_text(self.clock.remaining())}", markup=False, highlight=False)
        if self.verbose and trial.losses:
            self.console.print(f"      losses {loss_text(trial.losses)}; build {trial.build_s or 0:.3f} s")
        if self.verbose:
            for line in backend_stderr(trial.log):
                self.console.print(f"      stderr: {line}", markup=False, highlight=False)

    def job_done(self, outcome: JobOutcome) -> None:
        if outcome.error:
            self.err.print(f"[red]{outcome.job.name}: failed: {escape(outcome.error)}[/]")
        elif not self.quiet and outcome.selection is not None:
            self.console.print(f"{outcome.job.name}: {outcome.selection.summary}", markup=False)

    def message(self, text: str) -> None:
        self.err.print(text, markup=False, highlight=False)

    def phase(self, job: Job, text: str) -> None:
        if not self.quiet:
            self.console.print(f"  {job.name}: {text}", markup=False, highlight=False)

    def rebuild(self, job: Job, route: str) -> None:
        self.total += 1  # counted from here on, so the count never runs past its total
        self.at_most += 1
        if not self.quiet:
            self.console.print(f"  {job.name}: the engine of {describe(route)} is gone from the blob store; "
                               "building it again", markup=False, highlight=False)

    def close(self) -> None:
        pass


class RichReporter(PlainReporter):
    """A progress bar with ETA from measured trial times, over the plain lines."""

    def __init__(self, console: Console, verbose: bool = False, quiet: bool = False,
                 err: Console | None = None) -> None:
        super().__init__(console, verbose, quiet, err)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), EtaColumn(self.clock),
                                 console=console, transient=True)
        self.task: Any = None

    def plan(self, plan: Plan) -> None:
        super().plan(plan)
        if plan.builds:
            self.progress.start()
            self.task = self.progress.add_task("trials", total=plan.builds)

    def trial_done(self, job: Job, trial: TrialRecord) -> None:
        super().trial_done(job, trial)
        if self.task is not None:
            total = max(self.progress.tasks[0].total or 0, self.done)
            self.progress.update(self.task, completed=self.done, total=total,
                                 description=f"{job.name}")

    def close(self) -> None:
        if self.task is not None:
            self.progress.stop()


def _tolerance_text(job: Job) -> str:
    checks = ", ".join(f"{c.metric} < {c.threshold:g}" for c in job.tolerance.checks)
    return f"'{job.tolerance_name}': {checks or 'no checks'}" + "".join(
        f"; output {o}: " + ", ".join(f"{c.metric} < {c.threshold:g}" for c in cs)
        for o, cs in sorted(job.tolerance.outputs.items()))


def _verdict_style(reason: str, winner: bool) -> str:
    if winner:
        return "bold green"
    if reason.startswith(("slower", "tied", "not faster", "fastest in the search")):
        return ""
    return "dim" if reason.startswith("not a candidate") else "red"


def render_explain(ex: Explanation, console: Console) -> None:
    job = ex.job
    console.print(f"[bold]{escape(job.name)}[/]  backend {job.backend}, strategy '{job.strategy_name}' "
                  f"({job.strategy.mode}), switch group '{job.switch_group}', tolerance '{job.tolerance_name}'")
    if job.blocked:
        console.print(f"[red]blocked:[/] {escape(job.blocked)}")
    sel = ex.selection
    console.print("\n[bold]Decision:[/]")
    if sel is None:
        console.print("  No trials under this job's current signature and keys"
                      + (f" ({ex.other_groups} older group(s) of trials exist, see Provenance)"
                         if ex.other_groups else "") + ".", markup=False)
    else:
        for line in ex.decision:
            console.print(f"  {line}", markup=False, highlight=False)
        console.print(f"  Rule: {sel.rule}", markup=False, highlight=False)
        console.print(f"  Tolerance {_tolerance_text(job)}", markup=False, highlight=False)
        table = Table(title="Trials", title_justify="left", show_lines=False)
        add_columns(table, ("route", "status", "median ms", "95% CI", "losses", "build s", "verdict"),
                    {"route": [t.route for t in ex.trials]})
        keys = sorted({c.key for c in job.tolerance.checks}
                      | {c.key for cs in job.tolerance.outputs.values() for c in cs}) or None
        for t in ex.trials:
            reason = ex.verdict(t.route)
            style = _verdict_style(reason, t.route == sel.winner)
            route = escape(describe(t.route))
            table.add_row(f"[{style}]{route}[/]" if t.route == sel.winner else route, t.status,
                          ms(t.median_ms),
                          f"{ms(t.ci_low)}-{ms(t.ci_high)}" if t.ci_low is not None else "-",
                          escape(loss_text(t.losses, keys)), f"{t.build_s:.3f}" if t.build_s is not None else "-",
                          f"[{style}]{escape(reason)}[/]" if style else escape(reason))
        console.print(table)
    _render_provenance(ex, console)
    console.print("\n[bold]Lock:[/]")
    if ex.lock:
        eng = ex.lock.get("engine", {})
        console.print(f"  {describe(ex.lock.get('route') or '')} -> {eng.get('path')} "
                      f"(sha256 {str(eng.get('sha256'))[:12]})", markup=False, highlight=False)
    else:
        console.print("  no lock entry yet: run `trt-routes apply`", markup=False)
    if ex.decisions:
        console.print("\n[bold]History:[/] (lock decisions, oldest first)")
        for d in ex.decisions:
            prev = describe(d["previous_route"] or "") if d.get("previous_route") is not None else None
            was = f"; was {prev}" if prev is not None and prev not in str(d["reason"]) else ""
            console.print(f"  {d['at']}  {describe(d['route'] or '')}  ({d['reason']}{was}; engine "
                          f"{str(d.get('engine_sha256') or '')[:12]})", markup=False, highlight=False)


def _render_provenance(ex: Explanation, console: Console) -> None:
    prov = ex.provenance
    console.print("\n[bold]Provenance:[/]")
    if ex.signature:
        console.print(f"  signature {prov.get('signature_hash')}: "
                      + ", ".join(f"{k}={v}" for k, v in sorted(ex.signature.items())),
                      markup=False, highlight=False)
    if prov.get("trials"):
        hosts = ", ".join(f"{h} ({n})" for h, n in prov["hosts"].items())
        sources = ", ".join(("measured here" if s == "local" else f"imported from {s}") + f" ({n})"
                            for s, n in prov["sources"].items())
        console.print(f"  {prov['trials']} trial(s) measured {prov['measured']['first']} .. "
                      f"{prov['measured']['last']} on {hosts}; {sources}; trt-routes "
                      f"{', '.join(prov['tool_versions']) or '?'}", markup=False, highlight=False)
    if prov.get("precision"):
        console.print(f"  precision flags of every build: {prov['precision']}", markup=False, highlight=False)
    win = prov.get("winner_trial")
    if win:
        src = "measured here" if win["source"] == "local" else f"imported from {win['source']}"
        console.print(f"  winner trial {win['id'][:16]}: {win['created_at']} on {win['host']}, {src}",
                      markup=False, highlight=False)
    for g in ex.older:
        console.print(f"  older: {g['trials']} trial(s) up to {g['last']} no longer apply: "
                      + "; ".join(g["changed"]), markup=False, highlight=False)


def render_status(rows: list[JobStatus], console: Console) -> None:
    table = Table(title="Status", title_justify="left")
    add_columns(table, ("job", "state", "route", "detail"), {"route": [r.route or "" for r in rows]})
    for r in rows:
        style = "green" if r.state == "ok" else ("dim" if r.state == "blocked" else "red")
        table.add_row(r.job, f"[{style}]{r.state}[/]", describe(r.route) if r.route is not None else "-",
                      escape(r.detail))
    console.print(table)


def render_knobs(catalog: Catalog, console: Console, knob: str | None = None) -> None:
    """Like trtexec --helpBuildRoute: one block per knob."""
    console.print(f"{catalog.backend} {catalog.version}"
                  + (f", tuner {catalog.tuner_version}" if catalog.tuner_version else "")
                  + f": {len(catalog)} knobs (catalog {catalog.digest})")
    for k in catalog.knobs:
        if knob and k.option != knob and k.option.lstrip("-") != knob.lstrip("-"):
            continue
        console.print(f"  {k.allowed_text()}  (default {k.default}, {k.phase})", markup=False, highlight=False)
        if k.help:
            console.print(f"      {k.help}", markup=False, highlight=False)
