"""The ``trt-routes`` console script: an ``apply`` starts its worker before the CLI's own imports.

``apply`` starts its default local worker early (``execute.spawn.early_worker``) so that the worker's
interpreter and imports (numpy, ONNX Runtime: ~0.2 s) overlap the coordinator's start-up. Started from the
command's body, after typer, rich, pydantic and every command module were imported and the arguments parsed
(~0.14 s after launch), the worker was still importing when the first reference run was submitted. Here it
starts ~0.1 s sooner, before any of that.

Nothing is parsed here; the raw arguments only feed a guess: the command is ``apply``; none of the flags that
send the work elsewhere or do none (``--dry-run``, ``--frozen``, ``--executor``, ``--help``) is given, nor a
``TRT_ROUTES_EXECUTOR`` other than local; and this command line in this folder is not predicted to find
nothing to do (``execute.quiet``). The command then parses its arguments as ever: it adopts the worker, or
stops it at once when the parsed flags say it has no use for one. A wrong guess costs an idle worker stopped,
or a worker started later, never a result. Standard library, ``execute.spawn`` and ``execute.quiet`` only."""

from __future__ import annotations

__all__ = ["early_guess", "main", "utf8_relaunch"]

import os
import sys

#: Flags after which an apply has no use for a default local worker (or runs no command at all).
NO_EARLY_FLAGS = frozenset({"--dry-run", "--frozen", "--executor", "--help"})


def early_guess(argv: list[str]) -> bool:
    """Whether the command line ``argv`` (without the program name) most likely wants an early worker. Records
    the no-op prediction it made in ``quiet.LAUNCHED`` for ``apply`` to use."""
    if not argv or argv[0] != "apply":
        return False
    if any(arg.split("=", 1)[0] in NO_EARLY_FLAGS for arg in argv[1:]):
        return False
    if os.environ.get("TRT_ROUTES_EXECUTOR", "local").strip().lower() not in ("", "local"):
        return False
    from trt_routes.execute import quiet

    key = quiet.command_key(argv)
    quiet.LAUNCHED.update(key=key, predicted=quiet.predicted(key))
    return not quiet.LAUNCHED["predicted"]


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
    """Start the early worker on a good guess, then run the CLI (``cli.app.main``, which never returns)."""
    utf8_relaunch()
    if early_guess(sys.argv[1:]):
        from trt_routes.execute.spawn import start_early

        start_early()
    from trt_routes.cli.app import main as run

    run()
