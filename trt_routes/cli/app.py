"""The `trt-routes` typer app: the global --version flag, the command modules put together, ``main``, and
the one place where errors become exit codes (the table is ``trt_routes.errors.Exit``)."""

from __future__ import annotations

__all__ = ["app", "main"]

from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from trt_routes import __version__
from trt_routes.cli import audit, cache, init, lock, trials, tune
from trt_routes.cli.common import console
from trt_routes.errors import Exit, TrtRoutesError, storage_error


class _Commands(TyperGroup):
    """The root group. Every command runs inside its ``invoke``: a user error becomes one clear message and
    the exit code its class names (a disk that is full or read-only is a StorageError); Ctrl-C becomes 130.
    Anything else is a bug and keeps its traceback."""

    def invoke(self, ctx: Any) -> Any:  # a click Context (newer typer vendors its own click)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            console(stderr=True).print("interrupted: every finished trial is kept; run the same command again "
                                       "to resume")
            raise typer.Exit(Exit.INTERRUPTED) from None
        except (TrtRoutesError, OSError) as exc:
            clear = exc if isinstance(exc, TrtRoutesError) else storage_error(exc)
            if clear is None:  # an OSError that is not the disk refusing a write: a bug, keep its traceback
                raise
            console(stderr=True).print(f"[bold red]error:[/] {escape(str(clear))}", markup=True, highlight=False)
            raise typer.Exit(clear.exit_code) from None


app = typer.Typer(
    name="trt-routes",
    cls=_Commands,
    help="Declarative, cached and auditable build-route tuning (TensorRT, ONNX Runtime).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(init.app)  # init
app.add_typer(tune.app)  # validate, schema, knobs, plan, apply
app.add_typer(audit.app)  # status, explain, report
app.add_typer(trials.app)  # trials
app.add_typer(lock.app, name="lock")
app.add_typer(cache.app, name="cache")


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
