"""`trt-routes lock`: read tuning.lock (show an entry, check it against the manifest)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trt_routes.cli.common import JsonOpt, ManifestOpt, OnlyOpt, console, open_project, select_jobs, write_json
from trt_routes.errors import Exit

if TYPE_CHECKING:
    from trt_routes.gitops.check import Mismatch

app = typer.Typer(help="Read tuning.lock: show an entry, check it against the manifest.", no_args_is_help=True)


@app.command("show")
def lock_show(
    job: Annotated[str, typer.Argument(help="Job name, e.g. resnet-like/bs8/cpu.")],
    trtexec: Annotated[bool, typer.Option("--trtexec", help="Print the trtexec command that rebuilds the "
                                          "locked engine (TensorRT jobs only).")] = False,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Print a job's lock entry and what a serving process must set to run its engine as measured (or,
    with --trtexec, the command that rebuilds a TensorRT engine)."""
    from trt_routes.gitops.show import locked_job, serving_for, trtexec_for
    from trt_routes.report.gitops import lock_entry_text, serving_text

    locked = locked_job(manifest, job)
    if trtexec:
        typer.echo(trtexec_for(locked))
    elif as_json:
        write_json("lock-show", {"job": locked.name, "entry": locked.entry, "serving": serving_for(locked)})
    else:
        sys.stdout.write(lock_entry_text(locked.name, locked.entry) + serving_text(serving_for(locked)))


@app.command("check")
def lock_check(manifest: ManifestOpt = Path("tuning.yaml"), only: OnlyOpt = None, as_json: JsonOpt = False) -> None:
    """Does tuning.lock match the manifest? Exit 1 naming each job added, removed or changed (no GPU needed)."""
    from trt_routes.gitops.check import lock_mismatches, unchecked
    from trt_routes.report.gitops import render_mismatches

    project = open_project(manifest)
    jobs = select_jobs(project, only)
    mismatches = lock_mismatches(jobs, project.read_lock(), only)
    notes = unchecked(jobs)
    if as_json:
        write_json("lock-check", _check_json(mismatches, notes))
    else:
        render_mismatches(mismatches, notes, project.lock_path.name, console())
    raise typer.Exit(Exit.WORK if mismatches else Exit.OK)


def _check_json(mismatches: list[Mismatch], notes: list[str]) -> dict[str, Any]:
    return {"matches": not mismatches, "notes": notes,
            "mismatches": [{"job": m.job, "kind": m.kind, "details": list(m.details)} for m in mismatches]}
