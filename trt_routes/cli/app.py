"""The `trt-routes` typer app: the global --version flag, the command modules put together, ``main``, and
the one place where errors become exit codes (the table is ``trt_routes.errors.Exit``)."""

from __future__ import annotations

import contextlib

__all__ = ["app", "main"]

import os
import sys
from types import SimpleNamespace
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from trt_routes import __version__
from trt_routes.cli import audit, cache, init, lock, trials, tune
from trt_routes.cli.common import console, json_mode
from trt_routes.errors import Exit, TrtRoutesError, storage_error

try:  # a click usage error (bad flag or value): newer typer vendors its own click
    from typer._click.exceptions import UsageError as _ClickUsageError
except ImportError:  # pragma: no cover - typer on click
    from click.exceptions import UsageError as _ClickUsageError  # type: ignore[assignment]


def _json_wanted(args: list[str]) -> bool:
    """--json was given (its callback ran, or it is among the arguments when a parse error stopped them) or
    TRT_ROUTES_JSON is on."""
    return json_mode.on or "--json" in args or \
        os.environ.get("TRT_ROUTES_JSON", "").lower() in ("1", "true", "yes", "on")


def _json_error(exc: BaseException, code: int) -> None:
    from trt_routes.report.formats import dumps, error_document

    sys.stdout.write(dumps(error_document(exc, code)))


def _plain_metavars(command: Any) -> None:
    """Help without type noise: this typer renders every option's type (``<bool>``, ``<list[str]>``). A flag
    gets no metavar; any other option without one gets its type's name in capitals (PATH, INT, TEXT)."""
    for param in command.params:
        if getattr(param, "param_type_name", "") == "argument":
            param.display_type_rich = lambda ctx: None  # its name says what it is; no type column
            continue
        if getattr(param, "param_type_name", "") != "option" or param.metavar is not None:
            continue
        if param.is_flag:
            param.metavar = ""
        else:
            display = getattr(param, "display_type", None)  # typer >= 0.16; older ones render click's metavar
            if display is None:
                continue
            label = display(SimpleNamespace(help_option_names=["--help"])).strip("<>")
            label = label.removeprefix("list[").removesuffix("]")
            param.metavar = {"str": "TEXT"}.get(label, label.upper())
    help_option = command.get_help_option(SimpleNamespace(help_option_names=["--help"]))
    if help_option is not None:
        help_option.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _plain_metavars(sub)


class _Commands(TyperGroup):
    """The root group. Every command runs inside its ``invoke``: a user error becomes one clear message and
    the exit code its class names (a disk that is full or read-only is a StorageError; under --json, a
    ``trt-routes/error@1`` document on stdout); Ctrl-C becomes 130. Anything else is a bug and keeps its
    traceback."""

    def get_params(self, ctx: Any) -> Any:
        # before any help is drawn (typer adds the completion options late); cosmetic, so another typer or
        # click than the one this was written for never breaks a command over it
        with contextlib.suppress(AttributeError, TypeError):
            _plain_metavars(self)
        return super().get_params(ctx)

    def invoke(self, ctx: Any) -> Any:  # a click Context (newer typer vendors its own click)
        json_mode.on = False
        pending = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", None) or []
        args = [*pending, *ctx.args]  # the command's arguments, before the command parses them
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            if _json_wanted(args):
                _json_error(exc, Exit.INTERRUPTED)
            console(stderr=True).print("interrupted: every finished trial is kept; run the same command again "
                                       "to resume")
            raise typer.Exit(Exit.INTERRUPTED) from None
        except (TrtRoutesError, OSError) as exc:
            clear = exc if isinstance(exc, TrtRoutesError) else storage_error(exc)
            if clear is None:  # an OSError that is not the disk refusing a write: a bug, keep its traceback
                raise
            if _json_wanted(args):
                _json_error(clear, clear.exit_code)  # the document says it all: nothing else on either stream
            else:
                console(stderr=True).print(f"[bold red]error:[/] {escape(str(clear))}", markup=True,
                                           highlight=False)
            raise typer.Exit(clear.exit_code) from None
        except _ClickUsageError as exc:
            if not _json_wanted(args):
                raise
            _json_error(exc, Exit.USAGE)
            raise typer.Exit(Exit.USAGE) from None


app = typer.Typer(
    name="trt-routes",
    cls=_Commands,
    help="Declarative, cached and auditable build-route tuning (TensorRT, ONNX Runtime).",
    no_args_is_help=True,
    add_completion=True,
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


def utf8_relaunch() -> None:
    """Under a locale whose encoding is not UTF-8 (``LC_ALL=C PYTHONUTF8=0``), run again in Python's UTF-8
    mode, workers included (they inherit PYTHONUTF8=1): there a non-ASCII folder name would arrive as
    surrogate escapes that digests, SQLite and ONNX Runtime's session cannot take. Paths are bytes on
    POSIX, and the UTF-8 mode reads them as the UTF-8 they almost always are (others stay escaped)."""
    if sys.flags.utf8_mode or sys.getfilesystemencoding().lower().replace("-", "") == "utf8" or os.name != "posix":
        return
    saved = os.environ.get("PYTHONUTF8")
    os.environ["PYTHONUTF8"] = "1"
    try:
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    except OSError:  # cannot re-run: go on as we are, workers alike
        if saved is None:
            del os.environ["PYTHONUTF8"]
        else:
            os.environ["PYTHONUTF8"] = saved


def main() -> None:
    """Run the command (the ``trt-routes`` console script), then leave without the
    interpreter's teardown.

    Every exit handler still runs (``atexit``: multiprocessing's children, logging, temporary folders) and
    the standard streams are flushed; what is skipped is the module-by-module teardown of numpy, pydantic,
    ONNX and ONNX Runtime, ~40 ms of every command (12% of a no-op plan) that writes nothing. Files the
    commands write are closed (atomically renamed) before they return. Embed ``app`` instead to keep the
    process."""
    import atexit

    utf8_relaunch()
    code: int | str | None = 0
    try:
        app()
    except SystemExit as exc:
        code = exc.code
    if isinstance(code, str):  # SystemExit("message"): the interpreter prints it and exits 1
        print(code, file=sys.stderr)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe (| head): as the interpreter's own exit says it, 120
        code = code or 120
    atexit._run_exitfuncs()
    os._exit(code or 0)


if __name__ == "__main__":
    main()
