"""What every command module shares: the --manifest, --json and --only flags, the console, JSON output and
opening the project. No commands and no error handling here (errors become exit codes in ``app``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from trt_routes.project import Project

ManifestOpt = Annotated[Path, typer.Option("--manifest", "-m", help="Path to tuning.yaml.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="Job name pattern (fnmatch); repeatable.")]


def console(stderr: bool = False) -> Console:
    """Rich output; off a terminal, lines are not wrapped (160 columns) so logs and pipes stay greppable."""
    terminal = (sys.stderr if stderr else sys.stdout).isatty()
    return Console(stderr=stderr, width=None if terminal else 160, soft_wrap=not terminal)


def write_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def open_project(manifest: Path) -> Project:
    # imported here, not at the top: `--help` and `schema` stay fast
    from trt_routes.project import open_project as open_

    return open_(manifest)
