"""``trt-routes init``: a first tuning.yaml from one's own ONNX models, or the quickstart project."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from trt_routes.cli.common import console
from trt_routes.errors import UsageError

app = typer.Typer()


@app.command()
def init(
    models: Annotated[list[Path] | None, typer.Argument(
        help="ONNX model files (with --example: the folder to write the quickstart into, default '.').",
        show_default=False)] = None,
    dim: Annotated[list[str] | None, typer.Option(
        "--dim", help="A symbolic dimension's sizes: NAME=MIN,OPT,MAX or NAME=SIZE; repeatable. Asked for "
        "when missing and stdin is a terminal.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="The manifest to write.")] = Path("tuning.yaml"),
    backend: Annotated[str, typer.Option("--backend", "-b", help="Backend to tune with.")] = "onnxruntime",
    strategy: Annotated[str, typer.Option("--strategy", help="Default strategy: tuned (adaptive) or quick "
                                          "(trtexec's fast).")] = "tuned",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing tuning.yaml.")] = False,
    example: Annotated[bool, typer.Option("--example", help="Write the quickstart project (tuning.yaml and "
                                          "its two generated models) instead.")] = False,
) -> None:
    """Write a tuning.yaml for this machine from ONNX models: inputs, dtypes, shape profiles, integer ranges,
    the backend's recommended switch group and a tolerance for the precision."""
    from trt_routes.scaffold.write import init_manifest, parse_dim, write_example

    out_console = console()
    if example:
        if len(models or []) > 1 or dim:
            raise UsageError("init --example takes one folder and no --dim", "trt-routes init --example [DIR]")
        folder = (models or [Path(".")])[0]
        result = write_example(folder, force=force)
        out_console.print(f"wrote {result.path} and {len(result.models)} model(s) under "
                          f"{folder / 'recipes' / 'quickstart'}", markup=False)
        out_console.print(f"next: cd {folder} && trt-routes apply", markup=False)
        return
    dims = dict(parse_dim(d) for d in dim or [])
    result = init_manifest(models or [], out, dims=dims, backend=backend, strategy=strategy, force=force,
                           ask=_ask if sys.stdin.isatty() else None)
    out_console.print(f"wrote {result.path} ({len(result.models)} model(s): {', '.join(result.models)})",
                      markup=False)
    for where in result.unchecked:
        out_console.print(f"  check: {where}: integer range not inferred from the model (marked in the file)",
                          markup=False)
    out_console.print(f"next: trt-routes validate -m {out} && trt-routes apply -m {out}", markup=False)


def _ask(symbol: str, where: str) -> tuple[int, int, int]:
    from trt_routes.scaffold.write import parse_dim

    while True:
        text = typer.prompt(f"sizes of symbolic dimension '{symbol}' ({where}) as MIN,OPT,MAX or SIZE")
        try:
            return parse_dim(f"{symbol}={text}")[1]
        except UsageError as exc:
            typer.echo(str(exc), err=True)
