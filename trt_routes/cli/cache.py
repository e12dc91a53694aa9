"""`trt-routes cache`: share the trial cache (bundles, remotes) and maintain it (stats, gc, verify)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from trt_routes.cli.common import JsonOpt, ManifestOpt, OnlyOpt, console, open_project, write_json
from trt_routes.errors import Exit, UsageError

app = typer.Typer(help="Share and maintain the trial cache: bundles, remotes, stats, gc, verify.",
                  no_args_is_help=True)
RemoteOptionOpt = Annotated[list[str] | None, typer.Option(
    "--option", help="fsspec storage option KEY=VALUE, e.g. endpoint_url=http://127.0.0.1:9000; repeatable. "
    "Credentials come from the usual places (AWS_* variables, ~/.aws) and are never stored.")]


def _say(lines: list[str], color: str = "yellow") -> None:
    err = console(stderr=True)
    for line in lines:
        err.print(f"[{color}]{escape(line)}[/]", highlight=False)


@app.command("export")
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
    from trt_routes.share.merge import export_bundle

    r = export_bundle(open_project(manifest), file, engines=engines, outputs=outputs, only=only)
    if as_json:
        write_json("cache-export", r.to_json())
    else:
        typer.echo(f"{file}: {r.trials} trial(s), {r.signatures} signature(s), {r.blobs} blob(s), "
                   f"{r.bytes / 1e6:.1f} MB")
    _say(r.skipped)


@app.command("import")
def cache_import(
    file: Annotated[Path, typer.Argument(help="A bundle, a trtexec --tuningCacheFile, a Torch-TensorRT "
                                         "partition file or its base path (tune.jsonl for tune.<key>.jsonl).")],
    job: Annotated[str | None, typer.Option("--job", help="Manifest job that tuning-cache rows attach to "
                                            "(under their own 'unknown' signature: never used by plan).")] = None,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Merge a bundle (validated, one transaction, idempotent) or import a tuning cache as trials."""
    from trt_routes.share.merge import import_bundle
    from trt_routes.share.tuning_import import import_tuning_cache, sniff

    project = open_project(manifest)
    if sniff(file) == "bundle":
        if job:
            raise UsageError("--job is for trtexec / Torch-TensorRT tuning caches",
                             "a bundle's trials already name their jobs")
        reports = [import_bundle(project, file)]
    else:
        reports = import_tuning_cache(project, file, job)
    if as_json:
        write_json("cache-import", {"reports": [r.to_json() for r in reports]})
    else:
        for r in reports:
            typer.echo(r.text())


REMOTE_HELP = ("A remote named in tuning.yaml's remotes: (default: the one marked default), or a folder, "
               "file:///path or s3://bucket/prefix.")


@app.command("push")
def cache_push(
    url: Annotated[str | None, typer.Argument(help=REMOTE_HELP)] = None,
    option: RemoteOptionOpt = None,
    all_engines: Annotated[bool, typer.Option("--all-engines", help="Push the engine of every pushed trial, "
                                              "not only those tuning.lock references.")] = False,
    everything: Annotated[bool, typer.Option("--all", help="Ignore the local record of what the remote "
                                             "holds and push every trial again.")] = False,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Push the trials the remote lacks (one immutable segment) and the locked engines."""
    from trt_routes.share.remote import push, resolve_remote

    project = open_project(manifest)
    where, options = resolve_remote(project, url, option)
    r = push(project, where, options, all_engines=all_engines, everything=everything)
    if as_json:
        write_json("cache-push", r.to_json())
    else:
        typer.echo(r.text())
    _say(r.skipped)


@app.command("pull")
def cache_pull(
    url: Annotated[str | None, typer.Argument(help=REMOTE_HELP)] = None,
    option: RemoteOptionOpt = None,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Merge every remote segment not merged yet and materialize tuning.lock's engines (sha256 verified), as
    `dvc pull` checks out; other engines are fetched when a job needs one. Exit 2 when a segment was rejected
    (the others are merged, none half-way)."""
    from trt_routes.share.remote import pull, resolve_remote

    project = open_project(manifest)
    where, options = resolve_remote(project, url, option)
    r = pull(project, where, options)
    if as_json:
        write_json("cache-pull", r.to_json())
    else:
        typer.echo(r.text())
    _say(r.notes, "dim")
    _say([f"ignored {name} under segments/ (not a segment name)" for name in r.ignored])
    _say([f"error: rejected {line}" for line in r.rejected], "bold red")
    raise typer.Exit(Exit.USAGE if r.rejected else Exit.OK)


@app.command("stats")
def cache_stats(manifest: ManifestOpt = Path("tuning.yaml"), as_json: JsonOpt = False) -> None:
    """Trials by status, backend, source and signature; sizes; remotes."""
    from trt_routes.report.cache import render_stats
    from trt_routes.share.maintenance import stats

    s = stats(open_project(manifest))
    if as_json:
        write_json("cache-stats", s.to_json())
    else:
        render_stats(s, console())


@app.command("gc")
def cache_gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be dropped; drop nothing.")] = False,
    older_than: Annotated[float | None, typer.Option("--older-than", metavar="DAYS", help="Also drop the trials "
                                                     "of signatures not seen for DAYS (never those of this "
                                                     "machine's jobs or of tuning.lock).")] = None,
    manifest: ManifestOpt = Path("tuning.yaml"),
    as_json: JsonOpt = False,
) -> None:
    """Drop engine blobs nothing needs (tuning.lock's engines and each group's fastest ok trial stay)."""
    from trt_routes.report.cache import render_gc
    from trt_routes.share.maintenance import gc

    r = gc(open_project(manifest), dry_run=dry_run, older_than_days=older_than)
    if as_json:
        write_json("cache-gc", r.to_json())
    else:
        render_gc(r, console())


@app.command("verify")
def cache_verify(manifest: ManifestOpt = Path("tuning.yaml"), as_json: JsonOpt = False) -> None:
    """PRAGMA integrity_check, every trial row and every blob's sha256; corrupt blobs are evicted.
    Exit 1 when problems were found."""
    from trt_routes.report.cache import render_verify
    from trt_routes.share.maintenance import verify

    r = verify(open_project(manifest))
    if as_json:
        write_json("cache-verify", r.to_json())
    else:
        render_verify(r, console())
    raise typer.Exit(Exit.OK if r.ok else Exit.WORK)


@app.command("recover")
def cache_recover(manifest: ManifestOpt = Path("tuning.yaml"), as_json: JsonOpt = False) -> None:
    """Salvage every readable row of a damaged trial cache into a new file (same schema); the damaged file
    is kept beside it as trials.sqlite.damaged-<time>. Then `trt-routes apply` re-measures what was lost."""
    from trt_routes.share.maintenance import recover

    r = recover(open_project(manifest))
    if as_json:
        write_json("cache-recover", r.to_json())
    else:
        typer.echo(r.text())
