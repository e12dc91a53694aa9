"""``trt-routes trials``: every trial in the cache, as a table or as CSV (for a notebook or a spreadsheet)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trt_routes.cli.common import JsonOpt, ManifestOpt, console, open_project, write_json

app = typer.Typer()


@app.command()
def trials(
    job: Annotated[str | None, typer.Option("--job", help="Only jobs matching this pattern (fnmatch).")] = None,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on stdout: one row per trial, one column per "
                                         "field and per loss (loss:OUTPUT:METRIC).")] = False,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """List the trials in the project's cache (the Python API: trt_routes.api.trials)."""
    from rich.table import Table

    from trt_routes import api

    project = open_project(manifest)
    if as_csv:
        sys.stdout.write(api.trials_csv(project, job))
        return
    rows = api.trials(project, job)
    if as_json:
        write_json("trials", {"trials": [t.to_dict() for t in rows]})
        return
    table = Table("job", "route", "status", "median ms", "build s")
    for t in rows:
        table.add_row(t.job, t.route or "(default)", t.status, f"{t.median_ms:.4f}" if t.median_ms else "-",
                      f"{t.build_s:.2f}" if t.build_s is not None else "-")
    out = console()
    out.print(table)
    out.print(f"{len(rows)} trial(s)", markup=False)
