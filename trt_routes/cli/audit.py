"""Commands that read what was tuned and why: status, explain, report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trt_routes.cli.common import JsonOpt, ManifestOpt, OnlyOpt, console, open_project, select_jobs, write_json
from trt_routes.errors import Exit

app = typer.Typer()


@app.command()
def status(manifest: ManifestOpt = Path("tuning.yaml"), only: OnlyOpt = None, as_json: JsonOpt = False) -> None:
    """Lockfile against cache against engines on disk."""
    from trt_routes.audit.status import status as do_status
    from trt_routes.audit.status import status_exit
    from trt_routes.report.console import render_status

    project = open_project(manifest)
    rows = do_status(project)
    if only:
        names = {j.name for j in select_jobs(project, only)}
        rows = [r for r in rows if r.job in names]
    if as_json:
        write_json("status", {"ok": status_exit(rows) == Exit.OK, "jobs": [r.to_json() for r in rows]})
    else:
        render_status(rows, console())
    raise typer.Exit(status_exit(rows))


@app.command()
def explain(
    job: Annotated[str, typer.Argument(help="Job name, e.g. resnet-like/bs8/cpu.")],
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
    show_layers: Annotated[bool, typer.Option("--layers", help="Where the gain comes from: the default route "
                                              "against the winner, layer by layer (profiles taken if missing).")]
    = False,
) -> None:
    """Why a job's route was chosen: every trial, its verdict, and the lock history."""
    from trt_routes.audit.explain import explain as do_explain
    from trt_routes.report.console import render_explain

    if show_layers:
        from trt_routes.audit.layers import layers
        from trt_routes.report.layers_text import render_layers

        rep = layers(open_project(manifest), job)
        if as_json:
            write_json("layers", rep.to_json())
        else:
            render_layers(rep, console())
        return
    ex = do_explain(open_project(manifest), job)
    if as_json:
        write_json("explain", ex.to_json())
    else:
        render_explain(ex, console())


@app.command()
def profile(
    job: Annotated[str, typer.Argument(help="Job name, e.g. resnet-like/bs8/cpu.")],
    route: Annotated[str | None, typer.Option("--route", help="The route to profile ('' for the default); "
                                              "default: the locked route.")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Take the profile again even if one is stored.")] = False,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """One route's layer profile: where its engine spends its time, layer by layer."""
    from trt_routes.audit.layers import profile_job
    from trt_routes.report.layers_text import render_profile

    found, prof = profile_job(open_project(manifest), job, route, fresh)
    if as_json:
        write_json("profile", {"job": found.name, **{k: v for k, v in prof.to_json().items()},
                               "layers_ms": prof.total_ms})
    else:
        render_profile(found.name, prof, console())


@app.command()
def report(
    html: Annotated[Path, typer.Option("--html", help="Write a self-contained HTML report to FILE.")],
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Write an HTML report: speedup per job, latency against accuracy loss, effect of each knob value."""
    from trt_routes.report.html import write_report

    rep = write_report(open_project(manifest), html)
    with_trials = sum(1 for j in rep.jobs if j.points or j.unplotted)
    if as_json:
        write_json("report", {"html": str(html), "jobs": len(rep.jobs), "with_trials": with_trials})
        return
    console().print(f"wrote {html} ({len(rep.jobs)} job(s), {with_trials} with trials)", markup=False)
