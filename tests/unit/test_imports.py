"""Imports stay sound: every module of trt_routes and every bench script imports on its own in a fresh
interpreter, bench scripts import only names the package exports on purpose (listed in the ``__all__`` of
the module they import from), and the layers contract of pyproject's ``[tool.importlinter]`` holds."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _paths import REPO

PACKAGE = REPO / "trt_routes"
BENCH = sorted([*(REPO / "bench").glob("*.py"), *(REPO / "bench" / "probes").glob("*.py")])
#: optional heavy libraries: trt_routes imports them only where a backend or executor needs them
HEAVY = ("torch", "tensorrt", "ray", "cuda")


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "examples" / "recipes") in path.parents:
            continue  # recipe files shipped as data (a copy of the repo's recipes/), not modules of the package
        parts = path.relative_to(REPO).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def run_all(commands: dict[str, list[str]]) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each command in its own fresh interpreter, a few at a time."""

    def one(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(max_workers=max(2, 2 * (os.cpu_count() or 1))) as pool:
        return dict(zip(commands, pool.map(one, commands.values()), strict=True))


def test_the_module_list_covers_the_package() -> None:
    names = module_names()
    assert {"trt_routes", "trt_routes.cli.app", "trt_routes.selection.rank", "trt_routes.tune.apply"} <= set(names)
    assert len(names) > 50


def test_every_module_imports_on_its_own_in_a_fresh_interpreter() -> None:
    """A module that only imports after some other module (an import cycle, a missing import hidden by
    import order) or that pulls in torch/tensorrt/ray at import time fails here, named."""
    probe = "import importlib, sys; importlib.import_module(sys.argv[1]); " \
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    results = run_all({name: [sys.executable, "-c", probe, name] for name in module_names()})
    failed = {name: r.stderr.strip().splitlines()[-1:] for name, r in results.items() if r.returncode != 0}
    assert not failed, f"modules that do not import on their own: {failed}"
    eager = {name: r.stdout.split() for name, r in results.items() if r.stdout.split()}
    assert not eager, f"modules that import optional heavy libraries at import time: {eager}"


def test_every_bench_script_imports_on_its_own_without_running_main() -> None:
    loader = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('bench_script', sys.argv[1]); "
              "module = sys.modules['bench_script'] = importlib.util.module_from_spec(spec); "
              "spec.loader.exec_module(module)")
    results = run_all({p.name: [sys.executable, "-c", loader, str(p)] for p in BENCH})
    assert len(results) >= 9
    failed = {name: r.stderr.strip().splitlines()[-1:] for name, r in results.items() if r.returncode != 0}
    assert not failed, f"bench scripts that do not import on their own: {failed}"
    printed = {name: r.stdout[:200] for name, r in results.items() if r.stdout}
    assert not printed, f"bench scripts that run (print) on import: {printed}"


def sources(path: Path) -> list[tuple[ast.Module, int]]:
    """The script's syntax tree, plus the trees of the Python programs it holds in strings (the code of child
    processes), each with the offset that turns its line numbers into the file's."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    trees = [(tree, 0)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "trt_routes" in node.value:
            try:
                trees.append((ast.parse(node.value), node.lineno - 1))
            except SyntaxError:  # prose that mentions trt_routes, not a program
                continue
    return trees


def exported(module: str) -> set[str] | None:
    """The module's ``__all__``, or None where it has none."""
    names = getattr(importlib.import_module(module), "__all__", None)
    return None if names is None else set(names)


def unexported_imports(path: Path) -> list[str]:
    """``file:line: what`` for each trt_routes name the script uses that is not in its module's ``__all__``."""
    problems = []

    def check(line: int, module: str, name: str, shown: str) -> None:
        allowed = exported(module)
        if allowed is None:
            problems.append(f"{path.name}:{line}: {shown} ({module} has no __all__)")
        elif name not in allowed:
            problems.append(f"{path.name}:{line}: {shown} (not in {module}.__all__)")

    for tree, offset in sources(path):
        aliases: dict[str, str] = {}  # ``import trt_routes.x as y``: y -> trt_routes.x
        for node in ast.walk(tree):
            line = getattr(node, "lineno", 0) + offset
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trt_routes":
                assert node.level == 0 and node.module is not None
                for a in node.names:
                    check(line, node.module, a.name, f"from {node.module} import {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] != "trt_routes":
                        continue
                    if a.asname is None:
                        problems.append(f"{path.name}:{line}: import {a.name} (name what it uses: "
                                        f"`from {a.name} import ...` or `import {a.name} as ...`)")
                    else:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):  # what an aliased module is used for must be exported too
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                module = aliases[node.value.id]
                check(node.lineno + offset, module, node.attr, f"{module}.{node.attr}")
    return problems


def test_bench_scripts_import_only_names_in_their_modules_all() -> None:
    problems = [p for path in BENCH for p in unexported_imports(path)]
    assert not problems, "bench scripts use names their module does not export (__all__):\n" + "\n".join(problems)


def test_the_bench_check_sees_imports_in_functions_aliases_and_child_programs(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(
        'CHILD = """\nfrom trt_routes.selection import RULE, select\n"""\n'  # line 2: in a child program
        "\n"
        "def main():\n"
        "    from trt_routes.plan import make_plan\n"  # line 6: exported, fine
        "    from trt_routes.plan.diff import candidates_key\n"  # line 7: plan.diff has no __all__
        "    import trt_routes.execute.pool as pool\n"
        "    import trt_routes.routes\n"  # line 9: un-aliased
        "    return make_plan, candidates_key, pool.Slot, pool.threading, trt_routes.routes\n")  # line 10: .threading
    assert unexported_imports(script) == [
        "probe.py:7: from trt_routes.plan.diff import candidates_key (trt_routes.plan.diff has no __all__)",
        "probe.py:9: import trt_routes.routes (name what it uses: `from trt_routes.routes import ...` or "
        "`import trt_routes.routes as ...`)",
        "probe.py:10: trt_routes.execute.pool.threading (not in trt_routes.execute.pool.__all__)",
        "probe.py:2: from trt_routes.selection import RULE (not in trt_routes.selection.__all__)",
    ]


def test_every_name_in_an_all_exists() -> None:
    """An ``__all__`` is a promise: each name in it is a real attribute of the module."""
    missing = {}
    for name in module_names():
        mod = importlib.import_module(name)
        absent = [n for n in getattr(mod, "__all__", ()) if not hasattr(mod, n)]
        if absent:
            missing[name] = absent
    assert not missing, missing


def test_the_layers_contract_holds() -> None:
    """``lint-imports`` (import-linter) on pyproject's contracts: each layer imports only the layers below it."""
    if importlib.util.find_spec("importlinter") is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    beside = Path(sys.executable).parent / "lint-imports"
    exe = str(beside) if beside.exists() else shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is installed but its lint-imports command is not on PATH")
    proc = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout and "KEPT" in proc.stdout, proc.stdout
