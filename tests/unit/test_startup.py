"""What a command and a worker import at start-up (issue 20: the time a user waits), in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-P", "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_cache_does_not_import_pandas_and_pandas_still_imports_after() -> None:
    pytest.importorskip("pandas")  # where pandas is installed, sqlite-utils would import it (130 ms)
    assert "pandas" not in _modules_after("import trt_routes.cli.app, trt_routes.cache")
    assert "pandas" in _modules_after("import trt_routes.cache\nimport pandas")  # the block was lifted


def test_the_cache_does_not_import_numpy_and_numpy_still_imports_after() -> None:
    """sqlite-utils imports numpy (40 ms) only to map numpy scalar types to columns; the cache creates its
    tables from Python types, and the block is lifted at once."""
    assert "numpy" not in _modules_after("import trt_routes.cli.app, trt_routes.cache")
    assert "numpy" in _modules_after("import trt_routes.cache\nimport numpy")


_NUMPY_PROBE = """
import atexit, sys
sys.argv = ["trt-routes", *sys.argv[1:]]
import trt_routes.execute.local as local
import trt_routes.tune.apply as ap
from trt_routes.execute.tasks import TrialTask
seen = []
started, submit, release = ap.Applier.start, local.LocalExecutor.submit, local.LocalExecutor.release
def start(self, jp, active):
    seen.append(("start", "numpy" in sys.modules))  # when apply starts a job: nothing measured yet
    return started(self, jp, active)
def submitting(self, task, timeout):
    if isinstance(task, TrialTask):
        seen.append(("trial", task.hold, "numpy" in sys.modules))
    return submit(self, task, timeout)
def releasing(self, ticket):
    seen.append(("release", "numpy" in sys.modules))  # the held trial is timed after this
    return release(self, ticket)
ap.Applier.start, local.LocalExecutor.submit, local.LocalExecutor.release = start, submitting, releasing
atexit.register(lambda: print("NUMPY", "numpy" in sys.modules, seen[:4], flush=True))
from trt_routes.cli.launch import main
main()
"""


def test_plan_and_status_import_no_numpy_and_apply_imports_it_before_its_first_trial_is_timed(
        tmp_path: Path) -> None:
    """numpy (40 ms of start-up) is for measuring: a no-op plan or status reads stored facts without it. apply
    imports it while its first trial builds: that trial is held in its worker once built (TrialTask.hold) and
    released after the import, so the import runs beside the build, never beside a timing."""
    from _project import make_project
    from conftest import load_make_models

    models = load_make_models().write_models(tmp_path / "m")

    def run(project: str, *argv: str) -> str:
        manifest = make_project(tmp_path / project, models)
        out = subprocess.run([sys.executable, "-P", "-c", _NUMPY_PROBE, *argv, "-m", str(manifest)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.splitlines()[-1]

    run("primer", "apply")  # a first apply on this machine probes ONNX Runtime (numpy with it) for the memo
    assert run("p", "apply") == ("NUMPY True [('start', False), ('trial', True, False), ('release', True), "
                                 "('trial', False, True)]")
    assert run("p", "plan") == "NUMPY False []"
    assert run("p", "status") == "NUMPY False []"


def test_apply_locks_the_engine_identity_its_worker_read_and_never_imports_onnx(tmp_path: Path) -> None:
    """ONNX Runtime's lock entries carry the engine's structural identity (``onnx_identity``), which needs ONNX:
    the job's worker reads it (``tasks.IdentityTask``), so the coordinator never imports ONNX (~30 ms of the
    first job's lock) and the lock says what the coordinator would have read."""
    from _project import make_project
    from conftest import load_make_models

    from trt_routes.backends.onnx_identity import model_identity
    from trt_routes.lockfile import Lockfile

    models = load_make_models().write_models(tmp_path / "m")
    probe = ("import atexit, sys\nsys.argv = ['trt-routes', *sys.argv[1:]]\n"
             "atexit.register(lambda: print('ONNX', 'onnx' in sys.modules, flush=True))\n"
             "from trt_routes.cli.launch import main\nmain()\n")

    def run(manifest: Path) -> str:
        out = subprocess.run([sys.executable, "-P", "-c", probe, "apply", "-m", str(manifest)], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.splitlines()[-1]

    run(make_project(tmp_path / "primer", models))  # a first apply on this machine reads the models' graphs
    manifest = make_project(tmp_path / "p", models)
    assert run(manifest) == "ONNX False"
    entries = Lockfile.read(manifest.parent / "tuning.lock").jobs
    assert entries
    for entry in entries.values():
        assert entry.engine is not None and entry.engine.identity is not None
        assert entry.engine.identity == model_identity(manifest.parent / entry.engine.path)


def test_an_engine_identity_no_worker_can_read_is_read_by_the_coordinator(tmp_path: Path) -> None:
    """An executor whose workers may not see this machine's files (Ray) or no free worker: the coordinator reads
    the identity; an engine the worker could not read: the coordinator reads it and meets the error itself."""
    from _project import make_project
    from conftest import load_make_models

    from trt_routes.backends import registry
    from trt_routes.execute.local import LocalExecutor
    from trt_routes.project import open_project
    from trt_routes.tune.apply import Applier

    project = open_project(make_project(tmp_path / "p", load_make_models().write_models(tmp_path / "m")))
    job = project.jobs[0]
    backend = registry.get(job.backend)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    calls: list[object] = []

    class Remote(LocalExecutor):
        shares_files = False

        def run(self, task: object, timeout: float) -> object:
            calls.append(task)
            return super().run(task, timeout)

    for executor_class, expect_calls in ((Remote, 0), (LocalExecutor, 1)):
        calls.clear()
        with executor_class() as executor:
            applier = Applier.__new__(Applier)
            applier.executor = executor
            if executor_class is LocalExecutor:
                executor.run = lambda task, timeout, run=executor.run: (calls.append(task), run(task, timeout))[1]
            assert applier.identify(job, backend, job.model_path) == backend.engine_identity(job.model_path)
            assert len(calls) == expect_calls
            if executor_class is LocalExecutor:
                with pytest.raises(Exception, match=r"(?i)pars|protobuf|decode|load"):
                    applier.identify(job, backend, broken)  # the worker's error, met here
                assert len(calls) == 2


def test_a_worker_imports_neither_the_manifest_loader_nor_the_cache() -> None:
    loaded = _modules_after("import trt_routes.execute.worker, trt_routes.execute.tasks")
    assert "trt_routes.manifest.load" not in loaded and "yaml" not in loaded
    assert "trt_routes.cache.store" not in loaded and "sqlite_utils" not in loaded


def test_a_worker_imports_neither_the_manifest_schema_nor_pydantic() -> None:
    """A worker's start-up is on apply's path to its first task: the schema and pydantic were ~45 ms of it."""
    loaded = _modules_after("import trt_routes.execute.worker, trt_routes.execute.tasks, trt_routes.execute.spawn,"
                            " trt_routes.backends.onnxruntime")
    assert "trt_routes.manifest.schema" not in loaded and "pydantic" not in loaded


def test_the_units_name_every_fact_of_the_schema() -> None:
    from trt_routes.facts import UNITS
    from trt_routes.manifest.schema import FACTS

    assert set(UNITS) == set(FACTS)


def test_the_early_worker_starts_before_the_coordinator_imports_numpy_or_the_worker_code(tmp_path: Path) -> None:
    """The CLI imports execute.spawn alone to start the early worker: the standard library only (no numpy,
    pydantic, ONNX Runtime, nor the worker's own module in the coordinator), yet the child serves tasks."""
    code = (
        "import sys\n"
        "from trt_routes.execute.spawn import early_worker, _EARLY\n"
        "heavy = sorted(m for m in ('numpy', 'pydantic', 'onnxruntime', 'onnx', 'yaml', 'trt_routes.execute.worker',\n"
        "                           'trt_routes.execute.tasks') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "with early_worker():\n"
        "    assert _EARLY and 'numpy' not in sys.modules\n"
        "    from trt_routes.execute.local import LocalExecutor\n"
        "    from trt_routes.execute.tasks import WarmupTask\n"
        "    worker = _EARLY[0][1]\n"
        "    with LocalExecutor() as ex:\n"
        "        assert ex.run(WarmupTask(backend='onnxruntime', spec=None), 60).status == 'ok'\n"
        "        assert ex._worker is worker\n"
        "    assert 'trt_routes.execute.worker' not in sys.modules\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


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
_LAUNCH_PROBE = """
import atexit, sys
sys.argv = ["trt-routes", *sys.argv[1:]]
import trt_routes.execute.spawn as spawn
seen = []
init = spawn.Worker.__init__
def spy(self, *args, **kwargs):
    seen.append("typer" in sys.modules)
    init(self, *args, **kwargs)
spawn.Worker.__init__ = spy
atexit.register(lambda: print("LAUNCH", seen, flush=True))
from trt_routes.cli.launch import main
main()
"""


def test_the_console_script_starts_an_applys_worker_before_the_cli_imports(tmp_path: Path) -> None:
    """cli.launch guesses from the raw arguments: an apply's worker starts before typer (and rich, pydantic, the
    command modules: ~0.1 s) is imported; a dry run, a plan or a command with a flag that sends the work
    elsewhere start none; the next apply, predicted to find nothing to do, none either."""
    from _project import make_project
    from conftest import load_make_models

    manifest = make_project(tmp_path / "p", load_make_models().write_models(tmp_path / "m"))

    import json
    import os

    timings = tmp_path / "timings.jsonl"

    def run(*argv: str) -> str:
        out = subprocess.run([sys.executable, "-P", "-c", _LAUNCH_PROBE, *argv], capture_output=True, text=True,
                             timeout=300, cwd=manifest.parent, env={**os.environ, "TRT_ROUTES_TIMINGS": str(timings)})
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.splitlines()[-1]

    assert run("plan") == "LAUNCH []"
    assert run("apply", "--dry-run") == "LAUNCH []"
    assert run("apply") == "LAUNCH [False]"  # started before the CLI's imports, and taken by the executor
    references = [e for e in map(json.loads, timings.read_text().splitlines()) if e["event"] == "reference"]
    assert references[0]["worker_s"] == 0.0  # the first reference run was done while the coordinator planned
    assert all(e["worker_s"] > 0 for e in references[1:])
    assert run("apply") == "LAUNCH []"  # this command line in this folder: predicted up to date


@pytest.mark.parametrize(("argv", "env", "guess"), [
    (["apply"], {}, True),
    (["apply", "--only", "a", "-j", "1"], {}, True),
    (["apply", "--dry-run"], {}, False),
    (["apply", "--frozen"], {}, False),
    (["apply", "--executor=ray"], {}, False),
    (["apply", "--executor", "local"], {}, False),  # not parsed: any --executor is left to the command
    (["apply", "--help"], {}, False),
    (["apply"], {"TRT_ROUTES_EXECUTOR": "ray"}, False),
    (["apply"], {"TRT_ROUTES_EXECUTOR": "local"}, True),
    (["plan"], {}, False),
    (["--version"], {}, False),
    ([], {}, False),
])
def test_the_launchers_guess_from_the_raw_arguments(argv: list[str], env: dict[str, str], guess: bool,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trt_routes.cli.launch import early_guess
    from trt_routes.execute import quiet

    monkeypatch.setenv("TRT_ROUTES_MEMO", str(tmp_path / "memo"))
    monkeypatch.delenv("TRT_ROUTES_EXECUTOR", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(quiet, "LAUNCHED", {})
    assert early_guess(argv) is guess
    assert bool(quiet.LAUNCHED) is guess  # apply uses the launcher's key and prediction when it made one
    if guess:  # the key holds what stands for a flag in the environment: another manifest is another command
        key = quiet.command_key(argv)
        monkeypatch.setenv("TRT_ROUTES_MANIFEST", "other/tuning.yaml")
        assert quiet.command_key(argv) != key


#: Runs the console script's ``main`` on argv[1:], reporting the collector's state at exit and during the
#: command's first trt-routes call after the project is loaded.
_GC_PROBE = """
import atexit, gc, sys
seen = {}
import trt_routes.cli.common as common
opened = common.open_project
def spy(manifest):
    seen["before_open"] = gc.isenabled()
    project = opened(manifest)
    seen["after_open"] = gc.isenabled()
    seen["frozen"] = gc.get_freeze_count()
    return project
common.open_project = spy
import trt_routes.cli.tune
trt_routes.cli.tune.open_project = spy
atexit.register(lambda: print("GC", gc.isenabled(), seen, flush=True))
sys.argv = ["trt-routes", *sys.argv[1:]]
from trt_routes.cli.launch import main
main()
"""


def test_the_console_script_starts_without_the_collector_and_turns_it_on_for_the_work(tmp_path: Path) -> None:
    from _project import make_project
    from conftest import load_make_models

    manifest = make_project(tmp_path / "p", load_make_models().write_models(tmp_path / "m"))
    out = subprocess.run([sys.executable, "-P", "-c", _GC_PROBE, "plan", "-m", str(manifest)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.splitlines()[-1]
    assert line.startswith("GC True") and "'before_open': False" in line and "'after_open': True" in line, line
    frozen = int(line.split("'frozen': ")[1].rstrip("}"))
    assert frozen > 10_000  # what start-up allocated is out of the collector's sight
    version = subprocess.run([sys.executable, "-P", "-c", _GC_PROBE, "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.stdout.splitlines()[-1].startswith("GC True {}"), version.stdout  # no project: on at exit


#: Runs the console script's ``main`` on argv[1:]; at exit prints how many workers it started, whether
#: sqlite-utils and filelock were imported, and how many times the project's jobs were resolved.
_QUIET_PROBE = """
import atexit, sys
sys.argv = ["trt-routes", *sys.argv[1:]]
import trt_routes.execute.spawn as spawn
started = []
init = spawn.Worker.__init__
def counting(self, *args, **kwargs):
    started.append(1)
    init(self, *args, **kwargs)
spawn.Worker.__init__ = counting
atexit.register(lambda: print("PROBE", len(started), *(m in sys.modules for m in ("sqlite_utils", "filelock")),
                              "resolved", len(resolved), flush=True))
import trt_routes.project as project
resolved = []
resolve = project.resolve_jobs
def resolving(*args, **kwargs):
    resolved.append(1)
    return resolve(*args, **kwargs)
project.resolve_jobs = resolving
from trt_routes.cli.launch import main
main()
"""


def test_a_noop_apply_starts_no_worker_and_neither_plan_nor_apply_imports_sqlite_utils(tmp_path: Path) -> None:
    """After an apply that finished, the next apply of the same manifest whose manifest, lock and cache are as
    that apply left them starts no early worker (trt_routes.execute.quiet); a changed manifest gets one again.
    A plan or apply reads and writes the cache through sqlite3 alone (sqlite-utils, click, pluggy: ~30 ms), a
    first apply creating it too, and plan takes no project lock (filelock)."""
    import os

    from _project import make_project
    from conftest import load_make_models

    manifest = make_project(tmp_path / "p", load_make_models().write_models(tmp_path / "m"))

    def run(*argv: str) -> str:
        out = subprocess.run([sys.executable, "-P", "-c", _QUIET_PROBE, *argv, "-m", str(manifest)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.splitlines()[-1]

    first = run("apply").split()
    assert first[0] == "PROBE" and int(first[1]) >= 1 and first[2:4] == ["False", "True"]  # built, and locked
    # predicted up to date: no worker, the jobs resolved once (for the executor), the lock, no sqlite-utils
    assert run("apply") == "PROBE 0 False True resolved 1"
    assert run("plan") == "PROBE 0 False False resolved 1"
    st = manifest.stat()
    os.utime(manifest, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # the manifest may have changed
    assert run("apply") == "PROBE 1 False True resolved 2"  # started early (told the jobs' backends), stopped
    assert run("apply") == "PROBE 0 False True resolved 1"


def test_a_wrong_noop_guess_only_starts_the_worker_late(tmp_path: Path) -> None:
    """The hint watches the manifest, tuning.lock and the cache, not the models: new weights in a model's
    external data (torch's exporter writes them there) leave it predicting a no-op. That apply starts no
    early worker, finds the model digest changed, starts its worker with the first task and tunes as ever."""
    import os

    from _project import write_manifest
    from _real_models import external_data_mlp, rewrite_weights

    root = tmp_path / "p"
    model = external_data_mlp(root / "models")
    manifest = write_manifest(root, {
        "schema_version": 1, "measurement": {"warmup": 1, "iterations": 3, "repeats": 2, "timeout_s": 60},
        "switch_groups": {"g": "-graph_optimization_level=[basic|all]"}, "strategies": {"s": {"mode": "fast"}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"backend": "onnxruntime", "switch_group": "g", "strategy": "s", "tolerance": "t"},
        "models": {"mlp": {"path": "models/mlp.onnx", "shapes": {"b4": {"x": [4, 16]}}}}})

    def run(*argv: str) -> list[str]:
        out = subprocess.run([sys.executable, "-P", "-c", _QUIET_PROBE, *argv, "-m", str(manifest)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.splitlines()

    assert run("apply")[-1].startswith("PROBE 1 ")
    assert run("apply")[-1] == "PROBE 0 False True resolved 1"
    lock = (root / "tuning.lock").read_text()
    rewrite_weights(model, seed=7)
    out = run("apply")
    assert out[-1] == "PROBE 1 False True resolved 1", out  # no early worker; one for the first task
    assert any("Built 2 trial(s)" in line for line in out), out
    assert (root / "tuning.lock").read_text() != lock  # the new model digest is locked
    assert run("apply")[-1] == "PROBE 0 False True resolved 1"
    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # the model file itself, exported again
    assert run("apply")[-1] == "PROBE 1 False True resolved 2"  # the hint watches it: started early
