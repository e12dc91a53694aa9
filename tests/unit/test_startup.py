"""What a command and a worker import at start-up (issue 20: the time a user waits), in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-P", "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_a_worker_imports_neither_the_manifest_loader_nor_the_cache() -> None:
    loaded = _modules_after("import trt_routes.execute.worker, trt_routes.execute.tasks")
    assert "trt_routes.manifest.load" not in loaded and "yaml" not in loaded
    assert "trt_routes.cache.store" not in loaded


def test_a_worker_imports_neither_the_manifest_schema_nor_pydantic() -> None:
    """A worker's start-up is on apply's path to its first task: the schema and pydantic were ~45 ms of it."""
    loaded = _modules_after("import trt_routes.execute.worker, trt_routes.execute.tasks, trt_routes.execute.spawn,"
                            " trt_routes.backends.onnxruntime")
    assert "trt_routes.manifest.schema" not in loaded and "pydantic" not in loaded


def test_the_units_name_every_fact_of_the_schema() -> None:
    from trt_routes.evidence.facts import UNITS
    from trt_routes.manifest.schema import FACTS

    assert set(UNITS) == set(FACTS)


def test_a_worker_is_one_process_and_serves_tasks_with_the_coordinators_path(tmp_path: Path) -> None:
    """A worker is one interpreter: no resource-tracker process beside it (multiprocessing's spawn started one,
    ~20 ms of CPU during start-up), and it imports from the coordinator's ``sys.path`` (a probe module found
    only through a folder the coordinator added at run time)."""
    (tmp_path / "probe_here").mkdir()
    (tmp_path / "probe_here" / "__init__.py").write_text(
        "import os\nfrom dataclasses import dataclass\nfrom trt_routes.execute.tasks import TaskResult\n"
        "@dataclass(frozen=True)\nclass Where:\n    def execute(self):\n"
        "        return TaskResult(status='ok', meta={'ppid': os.getppid()})\n")
    code = (
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from probe_here import Where\n"
        "from trt_routes.execute.local import LocalExecutor\n"
        "with LocalExecutor() as ex:\n"
        "    result = ex.run(Where(), 60)\n"
        "    kids = open(f'/proc/{os.getpid()}/task/{os.getpid()}/children').read().split()\n"
        "print(result.status, result.meta.get('ppid') == os.getpid(), len(kids),\n"
        "      'multiprocessing.resource_tracker' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["ok", "True", "1", "False"]


def test_a_worker_spawned_from_a_script_does_not_run_the_script_again(tmp_path: Path) -> None:
    """The ``trt-routes`` console script is a file: a spawned child runs its parent's main file again, which
    imported the whole CLI (typer, rich, pydantic) into every worker. Workers leave it behind, as they leave
    a user's own script calling ``trt_routes.api`` (its top level runs once)."""
    marker = tmp_path / "ran.txt"
    script = tmp_path / "trt-routes"  # pip's console script, plus a probe run where main() would run
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "from trt_routes.cli.app import main\n"
        f"with open({str(marker)!r}, 'a') as fh:\n"
        "    fh.write('ran\\n')\n"
        "if __name__ == '__main__':\n"
        "    from _exec_probe import ModulesProbe\n"
        "    from trt_routes.execute.local import LocalExecutor\n"
        "    with LocalExecutor() as ex:\n"
        "        result = ex.run(ModulesProbe(names=('typer', 'rich', 'pydantic', 'trt_routes.cli.app')), 60)\n"
        "    print(result.status, result.meta.get('loaded'), sys.modules['__main__'].__file__ == __file__)\n"
    )
    proc = subprocess.run([sys.executable, "-P", str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "ok [] True"  # the parent's __main__ is its own again
    assert marker.read_text() == "ran\n"


#: Runs the console script's ``main`` on argv[1:]; at exit prints, for each worker started, whether typer had
#: been imported when it started.


#: Runs the console script's ``main`` on argv[1:], reporting the collector's state at exit and during the
#: command's first trt-routes call after the project is loaded.


#: Runs the console script's ``main`` on argv[1:]; at exit prints whether numpy, pandas and filelock were
#: imported.
_IMPORTS_PROBE = """
import atexit, sys
sys.argv = ["trt-routes", *sys.argv[1:]]
atexit.register(lambda: print("PROBE", *(m in sys.modules for m in ("numpy", "pandas", "filelock")),
                              flush=True))
from trt_routes.cli.app import main
main()
"""


def test_plan_and_status_import_neither_numpy_nor_pandas_and_apply_no_pandas(tmp_path: Path) -> None:
    """numpy is for measuring: a no-op plan or status reads stored facts without it; pandas is only for
    trt_routes.api's DataFrames; plan takes no project lock (filelock)."""
    from _project import make_project
    from conftest import load_make_models

    manifest = make_project(tmp_path / "p", load_make_models().write_models(tmp_path / "m"))

    def run(*argv: str) -> str:
        out = subprocess.run([sys.executable, "-P", "-c", _IMPORTS_PROBE, *argv, "-m", str(manifest)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.splitlines()[-1]

    assert run("apply") == "PROBE True False True"  # measured (numpy), the lock taken, no pandas
    assert run("plan") == "PROBE False False False"
    assert run("status") == "PROBE False False False"
