"""Renderers for the GitOps commands: ``apply --frozen``, ``lock show`` and ``lock check``."""

from __future__ import annotations

from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trt_routes.gitops.check import Mismatch
from trt_routes.gitops.frozen import FrozenResult
from trt_routes.report.console import ms
from trt_routes.routes import describe


def render_frozen(result: FrozenResult, console: Console) -> None:
    title = "Frozen rebuild (dry run: nothing built)" if result.dry_run else "Frozen rebuild"
    table = Table(title=title, title_justify="left")
    for col in ("job", "locked route", "built", "ms", "locked ms", "engine", "note"):
        table.add_column(col, overflow="fold")
    for j in result.jobs:
        if result.dry_run:
            note = "would rebuild" + (f"; signature drift: {'; '.join(j.drift)}" if j.drift else "")
            engine = j.locked_sha256[:12]
        else:
            note = f"[red]{escape(j.error)}[/]" if j.error else escape("; ".join(j.checks[1:]))
            engine = f"{j.engine_sha256[:12]} ({j.digest})" if j.engine_sha256 else "-"
        table.add_row(j.job.name, escape(describe(j.route)), "reused" if j.reused else str(j.built),
                      ms(j.median_ms), ms(j.locked_ms), escape(engine), note)
    for job, why in result.skipped:
        table.add_row(job.name, "-", "0", "-", "-", "-", f"[dim]skipped: {escape(why)}[/]")
    console.print(table)
    if result.dry_run:
        console.print(f"{len(result.jobs)} build(s) at most; the lockfile matches the manifest.")
        return
    drifted = [j for j in result.jobs if j.drift]
    if drifted:
        console.print(f"[yellow]signature drift allowed for {len(drifted)} job(s): timings not compared[/]")
    ok = sum(1 for j in result.jobs if j.ok)
    console.print(f"Rebuilt {result.built}, verified {ok} of {len(result.jobs)} job(s); tuning.lock unchanged"
                  + (f"; engines recorded in {result.record_path}" if result.record_path else "") + ".")


def render_mismatches(mismatches: list[Mismatch], notes: list[str], lock_name: str, console: Console) -> None:
    for note in notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    if not mismatches:
        console.print(f"{lock_name} matches the manifest.")
        return
    console.print(f"{lock_name} does not match the manifest ({len(mismatches)} job(s)):")
    for m in mismatches:
        console.print(f"  {m.text()}", markup=False, highlight=False)
    console.print("Run `trt-routes apply` where the jobs' targets are, then commit the lockfile.")


def lock_entry_text(name: str, entry: dict[str, Any]) -> str:
    """One lock entry as it appears in tuning.lock."""
    return yaml.safe_dump({name: entry}, sort_keys=True, default_flow_style=False, allow_unicode=True, width=100)


def serving_text(serving: dict[str, Any]) -> str:
    """``lock show``'s serving section: the snippet to paste (or the note saying why there is none)."""
    head = f"\n# serving: what a {serving['backend']} process must set to run {serving['engine']} as measured\n"
    settings = serving.get("settings")
    if not settings:
        return head + f"# {serving.get('note', 'nothing to set')}\n"
    body = settings.get("python") or yaml.safe_dump(settings, sort_keys=True, default_flow_style=False)
    return head + body
