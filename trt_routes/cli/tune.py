"""Commands that check the manifest and tune it: validate, schema, knobs, plan, apply."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trt_routes.cli.common import JsonOpt, ManifestOpt, OnlyOpt, console, open_project, select_jobs, write_json
from trt_routes.errors import Exit, UsageError

if TYPE_CHECKING:
    from trt_routes.gitops.frozen import FrozenOptions
    from trt_routes.plan.saved import SavedPlan
    from trt_routes.project import Project
    from trt_routes.tune.apply import ApplyOptions, ApplyResult

app = typer.Typer()


@app.command()
def validate(manifest: ManifestOpt = Path("tuning.yaml"), as_json: JsonOpt = False) -> None:
    """Check tuning.yaml: schema, references, switch groups against each backend's catalog."""
    project = open_project(manifest)
    if as_json:
        write_json("validate", {"manifest": str(manifest), "ok": True,
                                "models": len(project.loaded.manifest.models),
                                "jobs": [{"job": j.name, "backend": j.backend, "blocked": j.blocked or None}
                                         for j in project.jobs]})
        return
    out = console()
    out.print(f"{manifest}: ok ({len(project.loaded.manifest.models)} model(s), {len(project.jobs)} job(s))")
    for job in project.jobs:
        if job.blocked:
            out.print(f"  note: {job.name} cannot run here: {job.blocked}")


@app.command()
def schema(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to FILE.")] = None,
    fmt: Annotated[str | None, typer.Option("--format", metavar="NAME", help="Print the JSON Schema of a "
                                            "--json output instead, e.g. plan (trt-routes/plan@1) or error; "
                                            "--format list names them.")] = None,
) -> None:
    """Print the JSON Schema of tuning.yaml (for editors), or with --format that of a --json output."""
    from trt_routes.files.artifacts import atomic_write_text
    from trt_routes.manifest.load import manifest_json_schema
    from trt_routes.report.formats import DESCRIPTIONS, format_id, schema_for

    if fmt == "list":
        typer.echo("\n".join(f"{name}  ({format_id(name)}): {DESCRIPTIONS[name]}" for name in sorted(DESCRIPTIONS)))
        return
    data = schema_for(fmt) if fmt is not None else manifest_json_schema()
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if out:
        atomic_write_text(out, text)
    else:
        sys.stdout.write(text)


@app.command()
def knobs(
    knob: Annotated[str | None, typer.Argument(help="Show only this knob.")] = None,
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend whose catalog to show.")] = "onnxruntime",
    expr: Annotated[str | None, typer.Option("--expr", help="Print switch group GROUP of the manifest "
                                             "as a trtexec --tuneBuildRoutes expression.")] = None,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """List a backend's knobs with defaults and help (like trtexec --helpBuildRoute)."""
    from trt_routes.backends import registry
    from trt_routes.report.console import render_knobs

    if expr is not None:
        typer.echo(f"--tuneBuildRoutes=\"{_switch_group_expression(manifest, expr)}\"")
        return
    catalog = registry.require(backend).catalog()
    if knob and catalog.get(knob) is None and catalog.get("-" + knob.lstrip("-")) is None:
        import difflib

        close = difflib.get_close_matches(knob, catalog.options, n=1)
        raise UsageError(f"{backend} has no knob '{knob}'",
                         f"did you mean '{close[0]}'?" if close else "run `trt-routes knobs` to list them")
    if as_json:
        write_json("knobs", catalog.to_json())
    else:
        render_knobs(catalog, console(), knob)


@app.command()
def doctor() -> None:
    """Which backends can run here, and what they found (versions, execution providers, CUDA and cuDNN)."""
    from trt_routes.backends import registry

    out = console()
    for name, reason, found in registry.doctor():
        if reason:
            out.print(f"{name}: cannot run here: {reason}", markup=False, highlight=False)
            continue
        facts = ", ".join(f"{k} {v}" for k, v in found.items() if k != "backend")
        out.print(f"{name}: ok ({facts})", markup=False, highlight=False)


def _switch_group_expression(manifest: Path, group: str) -> str:
    """Switch group ``group`` of the manifest as the text of a trtexec --tuneBuildRoutes expression."""
    from trt_routes.manifest.load import load_manifest
    from trt_routes.routes import parse_expression

    groups = load_manifest(manifest).manifest.switch_groups
    if group not in groups:
        raise UsageError(f"no switch group '{group}' in {manifest}",
                         f"groups: {', '.join(sorted(groups)) or 'none'}")
    return parse_expression(groups[group], source=group).text()


@app.command()
def plan(
    manifest: ManifestOpt = Path("tuning.yaml"),
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when there is work, 3 when a job's "
                                                                "backend cannot load here, 2 when a job cannot work "
                                                                "as written (for CI).")] = False,
    as_json: JsonOpt = False,
    only: OnlyOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also save the plan to FILE (JSON) for "
                                             "`apply --plan FILE`.")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-j", envvar="TRT_ROUTES_WORKERS", min=1, help="Plan for this many local CPU workers, as "
        "apply would run them (more share the cores and change the CPU signature).")] = None,
) -> None:
    """Show what apply would do for each job, and why. Builds nothing, writes nothing (but --out FILE)."""
    from trt_routes.plan.diff import compute_plan  # not tune.apply: a plan imports no executor
    from trt_routes.report.console import render_plan

    project = open_project(manifest)
    workers = workers or project.loaded.manifest.execution.workers
    if workers and workers > 1 and project.loaded.manifest.execution.executor == "local":
        project.use_environment(cpu_share=(workers, None))  # apply's world: the jobs' CPU signature follows
    select_jobs(project, only)
    lock = project.read_lock()
    with project.read_cache() as cache:
        the_plan = compute_plan(project, cache, lock, only)
        if out is not None:
            from trt_routes.plan.saved import PlanState, save_plan

            save_plan(out, project, the_plan, PlanState.of(project, cache, only))
    if as_json:
        write_json("plan", the_plan.to_json())
    else:
        render_plan(the_plan, console())
    raise typer.Exit(the_plan.check_exit() if check else Exit.OK)


@app.command()
def apply(
    manifest: ManifestOpt = Path("tuning.yaml"),
    only: OnlyOpt = None,
    keep_going: Annotated[bool, typer.Option("--keep-going", help="Go on after a job fails; exit 4.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the routes that would be built.")] = False,
    frozen: Annotated[bool, typer.Option("--frozen", help="Rebuild exactly the locked route of each job from "
                                         "tuning.lock (no search), verify it, materialize the engine; the "
                                         "lock must match the manifest and is never rewritten.")] = False,
    allow_signature_drift: Annotated[bool, typer.Option(
        "--allow-signature-drift", help="With --frozen: rebuild even where this machine's signature differs "
        "from the locked one.")] = False,
    plan_file: Annotated[Path | None, typer.Option(
        "--plan", help="Execute a plan saved by `plan --out FILE`; refused when the manifest, lockfile or "
        "cache changed since.")] = None,
    as_json: JsonOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the summary.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Losses and build times per trial.")] = False,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-j", envvar="TRT_ROUTES_WORKERS", help="Local workers: GPUs used per GPU kind (default: "
        "all), CPU workers (default 1; more share the cores and change the CPU signature).")] = None,
    executor: Annotated[str | None, typer.Option(
        "--executor", envvar="TRT_ROUTES_EXECUTOR", help="local or ray (default: the manifest's "
        "execution.executor, else local).")] = None,
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster address, e.g. ray://head:10001 or auto (needs trt-routes[ray]).")] = None,
    retry_failed: Annotated[bool, typer.Option(
        "--retry-failed", help="Run the selected jobs' cached crashed and timed-out trials again.")] = False,
    remeasure: Annotated[bool, typer.Option(
        "--remeasure", help="Decide the selected jobs again: their side-by-side re-measurements are taken "
        "afresh (a decision made on a busy host).")] = False,
    profile: Annotated[bool, typer.Option(
        "--profile/--no-profile", help="Take a layer profile of each locked job's default and winner (backends "
        "with a profiler), for explain --layers.")] = True,
) -> None:
    """Tune what is missing or stale, then materialize engines and write tuning.lock."""
    from trt_routes.plan.saved import load_plan
    from trt_routes.tune.apply import ApplyOptions

    project = open_project(manifest)
    select_jobs(project, only)  # a pattern that matches no job, a model error: before any work
    saved = load_plan(plan_file) if plan_file is not None and not frozen else None
    options = ApplyOptions.from_flags(only=only, keep_going=keep_going, dry_run=dry_run, workers=workers,
                                      executor=executor, address=address, frozen=frozen,
                                      plan=plan_file is not None, retry_failed=retry_failed,
                                      remeasure=remeasure, profile=profile)
    if frozen:
        from trt_routes.gitops.frozen import FrozenOptions

        raise typer.Exit(_apply_frozen(project, FrozenOptions(
            only=options.only, allow_signature_drift=allow_signature_drift, keep_going=keep_going,
            dry_run=dry_run), as_json=as_json, quiet=quiet))
    raise typer.Exit(_apply(project, options, saved, as_json=as_json, quiet=quiet, verbose=verbose))


def _apply(project: Project, options: ApplyOptions, saved: SavedPlan | None, *, as_json: bool, quiet: bool,
           verbose: bool) -> int:
    from trt_routes.report.console import PlainReporter, RichReporter, render_dry_run, render_summary
    from trt_routes.tune.apply import apply as do_apply

    check_plan = None
    if saved is not None:  # run what the saved plan selected, refused if the plan went stale
        from trt_routes.plan.saved import plan_verifier

        options = dataclasses.replace(options, only=list(saved.state.only or []))
        check_plan = plan_verifier(saved, project)
    out = console(stderr=as_json)
    cls = RichReporter if out.is_terminal and not as_json else PlainReporter
    reporter = cls(out, verbose=verbose, quiet=quiet or as_json, err=console(stderr=True))
    try:
        result = do_apply(project, options, reporter, check_plan=check_plan)
    finally:
        reporter.close()
    if options.dry_run:
        if as_json:
            write_json("apply", {"exit_code": Exit.OK, "built": 0, "dry_run": True, "frozen": False,
                                 "lock_written": False, "jobs": [], "plan": result.plan.to_json(),
                                 "routes": {jp.job.name: list(jp.to_build) for jp in result.plan.jobs
                                            if jp.to_build}})
        else:
            render_dry_run(result.plan, out)
        return Exit.OK
    if as_json:
        write_json("apply", _apply_json(result))
    else:
        render_summary(result, out)
    if result.exit_code == Exit.UNAVAILABLE:
        console(stderr=True).print("some jobs need a backend that is unavailable here (see the plan); "
                                   "install it or run those jobs elsewhere")
    return result.exit_code


def _apply_json(result: ApplyResult) -> dict[str, Any]:
    return {"exit_code": result.exit_code, "built": result.built, "dry_run": False, "frozen": False,
            "lock_written": result.lock_written,
            "jobs": [{"job": o.job.name, "action": o.action, "built": o.built, "reused": o.reused,
                      "error": o.error, "lock": o.entry} for o in result.outcomes],
            "plan": result.plan.to_json()}


def _apply_frozen(project: Project, options: FrozenOptions, *, as_json: bool, quiet: bool) -> int:
    from trt_routes.gitops.frozen import apply_frozen
    from trt_routes.report.console import PlainReporter
    from trt_routes.report.gitops import render_frozen

    out = console(stderr=as_json)
    result = apply_frozen(project, options, PlainReporter(out, quiet=quiet or as_json, err=console(stderr=True)))
    if as_json:
        write_json("apply", {**result.to_json(), "frozen": True})
    else:
        render_frozen(result, out)
    return result.exit_code
