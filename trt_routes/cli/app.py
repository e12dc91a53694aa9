"""The command line: parse, call one library function, render. The only module importing typer,
and the one place where errors become exit codes (0 ok, 1 work found by --check, 2 usage/manifest/
lockfile error, 3 backend unavailable, 4 trials failed, 130 interrupted)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from trt_routes import __version__
from trt_routes.errors import BackendUnavailable, TrialsFailed, TrtRoutesError, UsageError

app = typer.Typer(
    name="trt-routes",
    help="Declarative, cached and auditable build-route tuning (TensorRT, ONNX Runtime).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ManifestOpt = Annotated[Path, typer.Option("--manifest", "-m", help="Path to tuning.yaml.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="Job name pattern (fnmatch); repeatable.")]

T = TypeVar("T")


def _console(stderr: bool = False) -> Console:
    terminal = (sys.stderr if stderr else sys.stdout).isatty()
    return Console(stderr=stderr, width=None if terminal else 160, soft_wrap=not terminal)


def _run(fn: Callable[[], T]) -> T:
    """Run a command body; user errors become one clear message and an exit code."""
    err = _console(stderr=True)
    try:
        return fn()
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        err.print("interrupted: every finished trial is kept; run the same command again to resume")
        raise typer.Exit(130) from None
    except TrtRoutesError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
        code = 3 if isinstance(exc, BackendUnavailable) else 4 if isinstance(exc, TrialsFailed) else 2
        raise typer.Exit(code) from None


def _json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def _project(manifest: Path) -> Any:
    from trt_routes.project import open_project

    return open_project(manifest)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"trt-routes {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and exit.")] = False,
) -> None:
    """Declarative, cached and auditable build-route tuning."""


@app.command()
def validate(manifest: ManifestOpt = Path("tuning.yaml")) -> None:
    """Check tuning.yaml: schema, references, switch groups against each backend's catalog."""

    def body() -> None:
        project = _project(manifest)
        jobs = project.jobs
        out = _console()
        out.print(f"{manifest}: ok ({len(project.loaded.manifest.models)} model(s), {len(jobs)} job(s))")
        for job in jobs:
            if job.blocked:
                out.print(f"  note: {job.name} cannot run here: {job.blocked}")

    _run(body)


@app.command()
def schema(out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to FILE.")] = None) -> None:
    """Print the JSON Schema of tuning.yaml (for editors)."""
    from trt_routes.artifacts import atomic_write_text
    from trt_routes.manifest.load import manifest_json_schema

    text = json.dumps(manifest_json_schema(), indent=2, sort_keys=True) + "\n"
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

    def body() -> None:
        from trt_routes.backends import registry
        from trt_routes.report.console import render_knobs

        if expr is not None:
            from trt_routes.manifest.load import load_manifest
            from trt_routes.routes import parse_expression

            loaded = load_manifest(manifest)
            groups = loaded.manifest.switch_groups
            if expr not in groups:
                raise UsageError(f"no switch group '{expr}' in {manifest}",
                                 f"groups: {', '.join(sorted(groups)) or 'none'}")
            typer.echo(f"--tuneBuildRoutes=\"{parse_expression(groups[expr], source=expr).text()}\"")
            return
        catalog = registry.require(backend).catalog()
        if knob and catalog.get(knob) is None and catalog.get("-" + knob.lstrip("-")) is None:
            import difflib

            close = difflib.get_close_matches(knob, catalog.options, n=1)
            raise UsageError(f"{backend} has no knob '{knob}'",
                             f"did you mean '{close[0]}'?" if close else "run `trt-routes knobs` to list them")
        if as_json:
            _json(catalog.to_json())
        else:
            render_knobs(catalog, _console(), knob)

    _run(body)


@app.command()
def plan(
    manifest: ManifestOpt = Path("tuning.yaml"),
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when there is work (for CI).")] = False,
    as_json: JsonOpt = False,
    only: OnlyOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also save the plan to FILE (JSON) for "
                                             "`apply --plan FILE`.")] = None,
) -> None:
    """Show what apply would do for each job, and why. Builds nothing, writes nothing (but --out FILE)."""

    def body() -> int:
        from trt_routes.report.console import render_plan
        from trt_routes.tune.apply import compute_plan

        project = _project(manifest)
        lock = project.read_lock()
        with project.open_cache() as cache:
            the_plan = compute_plan(project, cache, lock, only)
            if out is not None:
                from trt_routes.plan.saved import PlanState, save_plan

                save_plan(out, project, the_plan, PlanState.of(project, cache, only))
        if as_json:
            _json(the_plan.to_json())
        else:
            render_plan(the_plan, _console())
        return 1 if check and the_plan.has_work else 0

    raise typer.Exit(_run(body))


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
        "--workers", "-j", help="Local workers: GPUs used per GPU kind (default: all), CPU workers (default "
        "1; more share the cores and change the CPU signature).")] = None,
    executor: Annotated[str | None, typer.Option(
        "--executor", help="local or ray (default: the manifest's execution.executor, else local).")] = None,
    address: Annotated[str | None, typer.Option(
        "--address", help="Ray cluster address, e.g. ray://head:10001 or auto (needs trt-routes[ray]).")] = None,
) -> None:
    """Tune what is missing or stale, then materialize engines and write tuning.lock."""

    def body() -> int:
        nonlocal only
        from trt_routes.report.console import PlainReporter, RichReporter, render_dry_run, render_summary
        from trt_routes.tune.apply import ApplyOptions
        from trt_routes.tune.apply import apply as do_apply

        project = _project(manifest)
        if frozen and (workers is not None or executor not in (None, "local") or address is not None):
            raise UsageError("--frozen rebuilds one locked route per job, one job at a time, in one local "
                             "worker: --workers, --executor and --address do not apply to it",
                             "drop them, or tune with a plain `trt-routes apply`")
        if frozen:
            return _apply_frozen(project, only or [], keep_going, dry_run, allow_signature_drift, as_json,
                                 quiet, plan_file)
        if plan_file is not None:
            only, do_apply = _saved_plan(project, plan_file, only, do_apply)
        out = _console(stderr=as_json)
        cls = RichReporter if out.is_terminal and not as_json else PlainReporter
        reporter = cls(out, verbose=verbose, quiet=quiet or as_json)
        try:
            result = do_apply(project, ApplyOptions(only=only or [], keep_going=keep_going, dry_run=dry_run,
                                                    workers=workers, executor=executor, address=address),
                              reporter)
        finally:
            reporter.close()
        if dry_run:
            render_dry_run(result.plan, out)
            return 0
        if as_json:
            _json({"exit_code": result.exit_code, "built": result.built, "lock_written": result.lock_written,
                   "jobs": [{"job": o.job.name, "action": o.action, "built": o.built, "reused": o.reused,
                             "error": o.error, "lock": o.entry} for o in result.outcomes],
                   "plan": result.plan.to_json()})
        else:
            render_summary(result, out)
        code = result.exit_code
        if code == 3:
            _console(stderr=True).print("some jobs need a backend that is unavailable here (see the plan); "
                                        "install it or run those jobs elsewhere")
        return code

    raise typer.Exit(_run(body))


@app.command()
def status(manifest: ManifestOpt = Path("tuning.yaml"), as_json: JsonOpt = False) -> None:
    """Lockfile against cache against engines on disk."""

    def body() -> int:
        from trt_routes.audit.status import status as do_status
        from trt_routes.report.console import render_status

        rows = do_status(_project(manifest))
        if as_json:
            _json([r.to_json() for r in rows])
        else:
            render_status(rows, _console())
        return 0 if all(r.state in ("ok", "blocked") for r in rows) else 1

    raise typer.Exit(_run(body))


@app.command()
def explain(
    job: Annotated[str, typer.Argument(help="Job name, e.g. resnet-like/bs8/cpu.")],
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Why a job's route was chosen: every trial, its verdict, and the lock history."""

    def body() -> None:
        from trt_routes.audit.explain import explain as do_explain
        from trt_routes.report.console import render_explain

        ex = do_explain(_project(manifest), job)
        if as_json:
            _json(ex.to_json())
        else:
            render_explain(ex, _console())

    _run(body)


@app.command()
def report(
    html: Annotated[Path, typer.Option("--html", help="Write a self-contained HTML report to FILE.")],
    manifest: ManifestOpt = Path("tuning.yaml"),
) -> None:
    """Write an HTML report: speedup per job, latency against accuracy loss, effect of each knob value."""

    def body() -> None:
        from trt_routes.report.html import write_report

        rep = write_report(_project(manifest), html)
        with_trials = sum(1 for j in rep.jobs if j.points or j.unplotted)
        _console().print(f"wrote {html} ({len(rep.jobs)} job(s), {with_trials} with trials)", markup=False)

    _run(body)


def _apply_frozen(project: Any, only: list[str], keep_going: bool, dry_run: bool, allow_drift: bool,
                  as_json: bool, quiet: bool, plan_file: Path | None) -> int:
    from trt_routes.gitops.frozen import FrozenOptions, apply_frozen
    from trt_routes.report.console import PlainReporter
    from trt_routes.report.gitops import render_frozen

    if plan_file is not None:
        raise UsageError("--frozen and --plan exclude each other",
                         "--frozen rebuilds what tuning.lock records; --plan executes a saved plan")
    out = _console(stderr=as_json)
    reporter = PlainReporter(out, quiet=quiet or as_json)
    result = apply_frozen(project, FrozenOptions(only=only, allow_signature_drift=allow_drift,
                                                 keep_going=keep_going, dry_run=dry_run), reporter)
    if as_json:
        _json(result.to_json())
    else:
        render_frozen(result, out)
    return result.exit_code


def _saved_plan(project: Any, plan_file: Path, only: list[str] | None, do_apply: Any) -> tuple[list[str], Any]:
    """The saved plan's job selection, and apply bound to refuse the plan if it went stale."""
    import functools

    from trt_routes.plan.saved import load_plan, plan_verifier

    saved = load_plan(plan_file)
    if only:
        raise UsageError("--only cannot be combined with --plan", "the saved plan keeps the --only it was made with")
    return saved.state.only, functools.partial(do_apply, check_plan=plan_verifier(saved, project))


lock_app = typer.Typer(help="Read tuning.lock: show an entry, check it against the manifest.",
                       no_args_is_help=True)
app.add_typer(lock_app, name="lock")


@lock_app.command("show")
def lock_show(
    job: Annotated[str, typer.Argument(help="Job name, e.g. resnet-like/bs8/cpu.")],
    trtexec: Annotated[bool, typer.Option("--trtexec", help="Print the trtexec command that rebuilds the "
                                          "locked engine (TensorRT jobs only).")] = False,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Print a job's lock entry (or, with --trtexec, the command that rebuilds its engine)."""

    def body() -> None:
        from trt_routes.gitops.show import locked_job, trtexec_for
        from trt_routes.report.gitops import lock_entry_text

        locked = locked_job(manifest, job)
        if trtexec:
            typer.echo(trtexec_for(locked))
        elif as_json:
            _json({locked.name: locked.entry})
        else:
            sys.stdout.write(lock_entry_text(locked.name, locked.entry))

    _run(body)


@lock_app.command("check")
def lock_check(manifest: ManifestOpt = Path("tuning.yaml"), only: OnlyOpt = None, as_json: JsonOpt = False) -> None:
    """Does tuning.lock match the manifest? Exit 1 naming each job added, removed or changed (no GPU needed)."""

    def body() -> int:
        from trt_routes.gitops.check import lock_mismatches, unchecked
        from trt_routes.report.gitops import render_mismatches

        project = _project(manifest)
        jobs = project.select_jobs(only)
        mismatches = lock_mismatches(jobs, project.read_lock(), only)
        notes = unchecked(jobs)
        if as_json:
            _json({"matches": not mismatches, "notes": notes,
                   "mismatches": [{"job": m.job, "kind": m.kind, "details": list(m.details)} for m in mismatches]})
        else:
            render_mismatches(mismatches, notes, project.lock_path.name, _console())
        return 1 if mismatches else 0

    raise typer.Exit(_run(body))


cache_app = typer.Typer(help="Share and maintain the trial cache: bundles, remotes, stats, gc, verify.",
                        no_args_is_help=True)
app.add_typer(cache_app, name="cache")
RemoteOptionOpt = Annotated[list[str] | None, typer.Option(
    "--option", help="fsspec storage option KEY=VALUE, e.g. endpoint_url=http://127.0.0.1:9000; repeatable. "
    "Credentials come from the usual places (AWS_* variables, ~/.aws) and are never stored.")]


def _say(lines: list[str], color: str = "yellow") -> None:
    err = _console(stderr=True)
    for line in lines:
        err.print(f"[{color}]{escape(line)}[/]", highlight=False)


@cache_app.command("export")
def cache_export(
    file: Annotated[Path, typer.Argument(help="Bundle to write (a .tar.gz).")],
    engines: Annotated[bool, typer.Option("--engines", help="Include the engines of the exported trials.")] = False,
    outputs: Annotated[bool, typer.Option("--outputs", help="Include output and reference blobs "
                                          "(losses at new l0 parameters can then be recomputed).")] = False,
    only: OnlyOpt = None,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Write trials with provenance (signature, host, time, version) to a portable bundle."""

    def body() -> None:
        from trt_routes.share.merge import export_bundle

        r = export_bundle(_project(manifest), file, engines=engines, outputs=outputs, only=only)
        if as_json:
            _json(r.to_json())
        else:
            typer.echo(f"{file}: {r.trials} trial(s), {r.signatures} signature(s), {r.blobs} blob(s), "
                       f"{r.bytes / 1e6:.1f} MB")
        _say(r.skipped)

    _run(body)


@cache_app.command("import")
def cache_import(
    file: Annotated[Path, typer.Argument(help="A bundle, a trtexec --tuningCacheFile, a Torch-TensorRT "
                                         "partition file or its base path (tune.jsonl for tune.<key>.jsonl).")],
    job: Annotated[str | None, typer.Option("--job", help="Manifest job that tuning-cache rows attach to "
                                            "(under their own 'unknown' signature: never used by plan).")] = None,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Merge a bundle (validated, one transaction, idempotent) or import a tuning cache as trials."""

    def body() -> None:
        from trt_routes.share.merge import import_bundle
        from trt_routes.share.tuning_import import import_tuning_cache, sniff
        project = _project(manifest)
        if sniff(file) == "bundle":
            if job:
                raise UsageError("--job is for trtexec / Torch-TensorRT tuning caches",
                                 "a bundle's trials already name their jobs")
            reports = [import_bundle(project, file)]
        else:
            reports = import_tuning_cache(project, file, job)
        if as_json:
            _json([r.to_json() for r in reports])
        else:
            for r in reports:
                typer.echo(r.text())

    _run(body)


@cache_app.command("push")
def cache_push(
    url: Annotated[str, typer.Argument(help="Remote: a folder, file:///path or s3://bucket/prefix.")],
    option: RemoteOptionOpt = None,
    all_engines: Annotated[bool, typer.Option("--all-engines", help="Push the engine of every pushed trial, "
                                              "not only those tuning.lock references.")] = False,
    everything: Annotated[bool, typer.Option("--all", help="Ignore the local record of what the remote "
                                             "holds and push every trial again.")] = False,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Push the trials the remote lacks (one immutable segment) and the locked engines."""

    def body() -> None:
        from trt_routes.share.remote import parse_options, push

        r = push(_project(manifest), url, parse_options(option), all_engines=all_engines, everything=everything)
        if as_json:
            _json(r.to_json())
        else:
            typer.echo(r.text())
        _say(r.skipped)

    _run(body)


@cache_app.command("pull")
def cache_pull(
    url: Annotated[str, typer.Argument(help="Remote: a folder, file:///path or s3://bucket/prefix.")],
    option: RemoteOptionOpt = None,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Merge every remote segment not merged yet; engines are fetched (and verified) when a job needs one.
    Exit 2 when a segment was rejected (the others are merged, none half-way)."""

    def body() -> int:
        from trt_routes.share.remote import parse_options, pull

        r = pull(_project(manifest), url, parse_options(option))
        if as_json:
            _json(r.to_json())
        else:
            typer.echo(r.text())
        _say([f"ignored {name} under segments/ (not a segment name)" for name in r.ignored])
        _say([f"error: rejected {line}" for line in r.rejected], "bold red")
        return 2 if r.rejected else 0

    raise typer.Exit(_run(body))


@cache_app.command("stats")
def cache_stats(manifest: ManifestOpt = Path("tuning.yaml"), as_json: JsonOpt = False) -> None:
    """Trials by status, backend, source and signature; sizes; remotes."""

    def body() -> None:
        from trt_routes.report.cache import render_stats
        from trt_routes.share.maintenance import stats

        s = stats(_project(manifest))
        if as_json:
            _json(s.to_json())
        else:
            render_stats(s, _console())

    _run(body)


@cache_app.command("gc")
def cache_gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be dropped; drop nothing.")] = False,
    older_than: Annotated[float | None, typer.Option("--older-than", metavar="DAYS", help="Also drop the trials "
                                                     "of signatures not seen for DAYS (never those of this "
                                                     "machine's jobs or of tuning.lock).")] = None,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Drop engine blobs nothing needs (tuning.lock's engines and each group's fastest ok trial stay)."""

    def body() -> None:
        from trt_routes.report.cache import render_gc
        from trt_routes.share.maintenance import gc

        r = gc(_project(manifest), dry_run=dry_run, older_than_days=older_than)
        if as_json:
            _json(r.to_json())
        else:
            render_gc(r, _console())

    _run(body)


@cache_app.command("verify")
def cache_verify(manifest: ManifestOpt = Path("tuning.yaml"), as_json: JsonOpt = False) -> None:
    """PRAGMA integrity_check, every trial row and every blob's sha256; corrupt blobs are evicted.
    Exit 1 when problems were found."""

    def body() -> int:
        from trt_routes.report.cache import render_verify
        from trt_routes.share.maintenance import verify

        r = verify(_project(manifest))
        if as_json:
            _json(r.to_json())
        else:
            render_verify(r, _console())
        return 0 if r.ok else 1

    raise typer.Exit(_run(body))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
