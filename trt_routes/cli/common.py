"""What every command module shares: the --manifest, --json and --only flags, the console, JSON output and
opening the project. No commands and no error handling here (errors become exit codes in ``app``).

Environment variables (flags > environment > manifest): TRT_ROUTES_MANIFEST (--manifest), TRT_ROUTES_JSON
(--json), TRT_ROUTES_WORKERS and TRT_ROUTES_EXECUTOR (apply's --workers and --executor)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from trt_routes.jobs import Job
    from trt_routes.project import Project


class _JsonMode:
    """Whether this invocation asked for --json: set by the flag's callback, read by ``app`` to write a
    failure as a JSON error document."""

    on = False


json_mode = _JsonMode()


def _json_flag(value: bool) -> bool:
    json_mode.on = json_mode.on or bool(value)
    return value


ManifestOpt = Annotated[Path, typer.Option("--manifest", "-m", envvar="TRT_ROUTES_MANIFEST",
                                           help="Path to tuning.yaml.")]
JsonOpt = Annotated[bool, typer.Option("--json", envvar="TRT_ROUTES_JSON", callback=_json_flag,
                                       help="One JSON object on stdout (`trt-routes schema --format NAME` prints "
                                       "its schema); errors too.")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", metavar="PATTERN",
                                                   help="Job name pattern (fnmatch); repeatable.")]


def console(stderr: bool = False) -> Console:
    """Rich output; off a terminal, lines are not wrapped (160 columns) so logs and pipes stay greppable."""
    terminal = (sys.stderr if stderr else sys.stdout).isatty()
    return Console(stderr=stderr, width=None if terminal else 160, soft_wrap=not terminal)


def write_json(name: str, payload: dict[str, Any]) -> None:
    """Command ``name``'s output as its ``trt-routes/<name>@1`` document (report/formats.py)."""
    from trt_routes.report.formats import document, dumps

    sys.stdout.write(dumps(document(name, payload)))


def open_project(manifest: Path) -> Project:
    # imported here, not at the top: `--help` and `schema` stay fast
    from trt_routes.project import open_project as open_

    return open_(manifest)


def select_jobs(project: Project, only: list[str] | None) -> list[Job]:
    """``project``'s jobs matching ``only``; a pattern that matches no job is a usage error naming it and
    the closest job names (a typo must not read as "every job is up to date")."""
    import difflib
    import fnmatch

    from trt_routes.errors import UsageError

    names = [j.name for j in project.jobs]
    for pattern in only or []:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.4)
            raise UsageError(f"--only '{pattern}' matches no job",
                             f"closest: {', '.join(close)}" if close else
                             f"jobs: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}")
    return project.select_jobs(only)
