"""The CLI's shape: every command documented, typer confined to trt_routes/cli/, one exit-code table."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import typer

import trt_routes
from trt_routes import errors
from trt_routes.cli.app import app
from trt_routes.errors import Exit

PACKAGE = Path(trt_routes.__file__).parent
CLI = PACKAGE / "cli"


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:  # click commands (typer may vendor click)
    found = {prefix or "trt-routes": group}
    for name, cmd in getattr(group, "commands", {}).items():
        found.update(_commands(cmd, f"{prefix} {name}".strip()))
    return found


def test_every_command_subcommand_and_flag_has_help() -> None:
    commands = _commands(typer.main.get_command(app))
    assert {"validate", "schema", "knobs", "plan", "apply", "status", "explain", "report", "lock", "lock show",
            "lock check", "cache", "cache export", "cache import", "cache push", "cache pull", "cache stats",
            "cache gc", "cache verify"} <= set(commands)
    undocumented = [name for name, cmd in commands.items() if not (cmd.help or "").strip()]
    assert not undocumented, f"commands without help text: {undocumented}"
    bare = [f"{name} {p.name}" for name, cmd in commands.items() for p in cmd.params
            if not (getattr(p, "help", None) or "").strip()]
    assert not bare, f"options/arguments without help text: {bare}"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_cli_package_imports_typer_or_click() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 40 and CLI / "app.py" in modules
    outside = [str(p.relative_to(PACKAGE)) for p in modules
               if CLI not in p.parents and _imports(p) & {"typer", "click"}]
    assert not outside, f"typer/click imported outside trt_routes/cli/: {outside}"
    assert "typer" in _imports(CLI / "app.py")  # the scan sees real imports


def test_exit_codes_are_one_table_and_each_error_names_its_code() -> None:
    assert {e.name: int(e) for e in Exit} == {"OK": 0, "WORK": 1, "USAGE": 2, "UNAVAILABLE": 3, "FAILED": 4,
                                              "INTERRUPTED": 130}
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.TrtRoutesError)]
    assert len(classes) >= 8
    assert all(isinstance(c.exit_code, Exit) for c in classes)
    assert errors.BackendUnavailable.exit_code is Exit.UNAVAILABLE
    assert errors.TrialsFailed.exit_code is Exit.FAILED
    assert errors.ManifestError.exit_code is errors.UsageError.exit_code is Exit.USAGE
    from trt_routes.backends.tensorrt.catalog import CatalogFormatError
    from trt_routes.tune import apply

    assert CatalogFormatError.exit_code is Exit.UNAVAILABLE  # a subclass inherits its parent's code
    assert (apply.EXIT_OK, apply.EXIT_WORK, apply.EXIT_USAGE, apply.EXIT_UNAVAILABLE, apply.EXIT_FAILED) == (
        Exit.OK, Exit.WORK, Exit.USAGE, Exit.UNAVAILABLE, Exit.FAILED)


def test_no_module_outside_the_cli_exits_the_process() -> None:
    """Errors become exit codes in cli/ only: the library raises, it never calls sys.exit / raises SystemExit."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if CLI in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            exits = isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.exit"
            raises = isinstance(node, ast.Raise) and node.exc is not None and "SystemExit" in ast.unparse(node.exc)
            if exits or raises:
                offenders.append(f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}")
    assert not offenders, offenders
