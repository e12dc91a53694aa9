"""Real subprocess isolation: segfaults, aborts, hangs, exceptions and NaN outputs in workers
become failed trials with their cause, and the run goes on. Uses tests/fault_backend.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _paths import TESTS
from _project import make_project

from trt_routes.execute.local import LocalExecutor
from trt_routes.project import open_project
from trt_routes.tune.apply import ApplyOptions, SilentReporter, apply

TESTS = TESTS


def test_every_fault_becomes_a_trial_and_the_run_goes_on(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(
        tmp_path / "p", tiny_models, backend="faulty",
        group="-fault=[segv|abort|hang|raise|nan|inf|nan-timing] -intra_op_num_threads=[1]",
        measurement={"warmup": 1, "iterations": 2, "repeats": 1, "timeout_s": 8},
    )
    starts: list[LocalExecutor] = []

    def factory() -> LocalExecutor:
        ex = LocalExecutor()
        starts.append(ex)
        return ex

    result = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]), executor_factory=factory)
    assert result.exit_code == 0
    (outcome,) = result.outcomes
    sel = outcome.selection
    assert sel is not None and sel.winner in ("", "-intra_op_num_threads=1")
    reasons = {v.route: (v.status, v.reason) for v in sel.verdicts}
    assert reasons["-fault=segv"][0] == "crashed" and "SIGSEGV" in reasons["-fault=segv"][1]
    assert reasons["-fault=abort"][0] == "crashed" and "SIGABRT" in reasons["-fault=abort"][1]
    assert reasons["-fault=hang"][0] == "timeout" and "8 s time limit" in reasons["-fault=hang"][1]
    assert reasons["-fault=raise"][0] == "build-error" and "injected build failure" in reasons["-fault=raise"][1]
    assert reasons["-fault=nan"][0] == "accuracy-failed" and "non-finite" in reasons["-fault=nan"][1]
    assert reasons["-fault=inf"][0] == "accuracy-failed"
    assert reasons["-fault=nan-timing"] == ("crashed",
                                            "crashed: the backend returned unusable timings (NaN or Inf samples)")
    assert outcome.failed == 7
    # the first worker served the reference and the default route; each of the 7 failures replaced
    # its worker, and the last replacement served the healthy route after them
    assert starts[0].workers_started == 1 + 7
    assert outcome.built == 9


def test_a_failing_default_route_still_selects_an_eligible_route(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty",
                            group="-fault=segv -intra_op_num_threads=[1|2]")
    result = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]))
    (outcome,) = result.outcomes
    # every route carries the pinned fault: nothing is eligible but the default route
    assert outcome.selection is not None and outcome.selection.winner == ""


def test_a_route_wrong_only_at_the_profile_max_is_ineligible_and_says_where(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    from _project import edit_manifest

    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-fault=[wrong-at-max]")
    edit_manifest(manifest, lambda d: d["models"]["cnn"].update(shapes={"dyn": {"input": {
        "min": [1, 3, 32, 32], "opt": [2, 3, 32, 32], "max": [4, 3, 32, 32]}}}))
    result = apply(open_project(manifest))
    (outcome,) = result.outcomes
    sel = outcome.selection
    assert sel is not None and sel.winner == ""
    verdict = sel.verdict("-fault=wrong-at-max")
    assert verdict is not None and not verdict.eligible
    assert "lInf 1 >= 0.01 at the profile's max" in verdict.reason, verdict.reason
    with open_project(manifest).open_cache() as cache:
        trials = {t.route: t for t in cache.all_trials()}
    bad, default = trials["-fault=wrong-at-max"], trials[""]
    assert bad.status == "ok" and (bad.meta.loss_points or {})["logits"]["lInf"] == "max"
    assert default.meta.profile_points == ["min", "opt", "max"]
    from trt_routes.audit.explain import explain

    text = str(explain(open_project(manifest), "cnn/dyn/cpu").to_json())
    assert "at the profile's max" in text, text


def test_an_infrastructure_failure_is_not_cached_as_the_routes_trial(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    from _project import routes_and_statuses

    from trt_routes.tune.apply import compute_plan

    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-fault=[enospc]")
    messages: list[str] = []

    class Collect(SilentReporter):
        def message(self, text: str) -> None:
            messages.append(text)

    apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]), reporter=Collect())
    assert routes_and_statuses(manifest)["cnn/bs1/cpu"] == {"": "ok"}  # the disk-full build left no trial
    assert any("-fault=enospc: not cached: infrastructure: cannot write" in m
               for m in messages), messages
    project = open_project(manifest)
    with project.open_cache() as cache:
        (jp,) = compute_plan(project, cache, project.read_lock(), ["cnn/bs1/*"]).jobs
    assert "-fault=enospc" in jp.to_build  # the next apply runs it again


def test_our_own_file_failures_are_infrastructure(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    from trt_routes.backends.base import BuildSpec
    from trt_routes.execute.tasks import TrialTask
    from trt_routes.execute.worker import _run

    (tmp_path / "not-a-folder").write_text("")
    shape = [1, 3, 32, 32]
    spec = BuildSpec(model_path=str(tiny_models["resnet_like"]), route={}, profile={"input": {
        "min": shape, "opt": shape, "max": shape}}, settings={}, target={"kind": "cpu"}, work_dir=str(tmp_path))
    task = TrialTask(backend="onnxruntime", spec=spec, store_root=str(tmp_path / "not-a-folder" / "store"),
                     inputs_sha="0" * 64, reference_sha="1" * 64, l0_params=((1e-5, 1e-5),), warmup=1,
                     iterations=1, repeats=1)
    result = _run(task)  # the engine cannot be stored: the blob store lies under a file
    assert result.status == "crashed" and result.infrastructure, result
    assert result.error.startswith("infrastructure: storing the engine: NotADirectoryError"), result.error


def test_a_worker_that_cannot_start_is_an_infrastructure_failure() -> None:
    import os

    from trt_routes.execute.tasks import WarmupTask

    if not hasattr(os, "sched_setaffinity"):
        import pytest

        pytest.skip("no CPU affinity on this platform")
    with LocalExecutor(cpus=frozenset({100_000})) as executor:  # no such core: the spawn fails
        result = executor.run(WarmupTask(backend="onnxruntime", spec=None), 10)  # type: ignore[arg-type]
    assert result.status == "crashed" and result.infrastructure
    assert "could not start a worker process" in result.error


def test_retry_failed_runs_cached_crashed_trials_again(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-fault=[segv]")
    first = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]))
    assert first.outcomes[0].built == 2
    again = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]))
    assert sum(o.built for o in again.outcomes) == 0  # the crash is cached: nothing runs
    retried = apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"], retry_failed=True))
    (outcome,) = retried.outcomes
    assert outcome.built == 1 and outcome.failed == 1  # only the crashed route ran again
    other = apply(open_project(manifest), ApplyOptions(only=["cnn/bs4/*"], retry_failed=True))
    assert other.outcomes[0].built == 2  # bs4 was never tuned: its two routes, nothing of bs1's


def test_the_retry_failed_flag_of_the_command_line(faulty: None, tmp_path: Path,
                                                  tiny_models: dict[str, Path]) -> None:
    from _project import cli

    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-fault=[segv]")
    assert cli("apply", "--only", "cnn/bs1/*", "--keep-going", "-m", str(manifest))[0] in (0, 4)
    code, out = cli("apply", "--only", "cnn/bs1/*", "--retry-failed", "--json", "-m", str(manifest))
    assert code in (0, 4), out
    import json

    (job,) = json.loads(out)["jobs"]
    assert job["built"] == 1  # the crashed route ran again, the ok one did not


def test_plan_advice_follows_the_cause(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    from _trials import record

    from trt_routes.plan.advice import no_eligible_advice

    job = open_project(make_project(tmp_path / "p", tiny_models)).jobs[0]
    routes = ("", "-intra_op_num_threads=2")
    crashed = {r: record(job, r, "crashed", error="worker died with SIGSEGV\nmore") for r in routes}
    text = no_eligible_advice(job.name, "t", crashed, routes)
    assert "2 crashed" in text and "first error: worker died with SIGSEGV" in text
    assert f"trt-routes apply --retry-failed --only {job.name}" in text and "loosen" not in text
    broken = {r: record(job, r, "build-error", error="bad knob") for r in routes}
    assert "every route failed to build" in no_eligible_advice(job.name, "t", broken, routes)
    gated = {r: record(job, r, "ok", 1.0, losses={"logits": {"cos": 0.5}}) for r in routes}
    assert no_eligible_advice(job.name, "t", gated, routes).endswith("loosen tolerance 't' or change the switch group")
    mixed = {"": crashed[""], routes[1]: gated[routes[1]]}
    text = no_eligible_advice(job.name, "t", mixed, routes)
    assert "1 crashed, 1 ok" in text and "loosen tolerance 't'" in text and "--retry-failed" in text


def test_retry_failed_flag_rules() -> None:
    import pytest

    from trt_routes.errors import UsageError

    assert ApplyOptions.from_flags(only=["cnn/*"], retry_failed=True).retry_failed
    for flags in ({"frozen": True}, {"plan": True}):
        with pytest.raises(UsageError, match="--retry-failed cannot be combined"):
            ApplyOptions.from_flags(retry_failed=True, **flags)  # type: ignore[arg-type]


def test_a_scratch_folder_removed_under_the_worker_does_not_kill_it(tmp_path: Path) -> None:
    """On a Ray node, a task's blob store (and the worker's scratch in it) lives in the task's staging
    folder, removed as soon as the result is back, while the worker empties its scratch: the worker died
    there (FileNotFoundError, exit code 1) and the next task, a node probe, failed with 'worker died'."""
    from trt_routes.execute import worker
    from trt_routes.files.artifacts import BlobStore

    gone = tmp_path / "task-1" / "store"
    kept = tmp_path / "task-2" / "store"
    (worker._scratch("", BlobStore(gone)) / "engine.onnx").write_bytes(b"x")
    (worker._scratch("", BlobStore(kept)) / "engine.onnx").write_bytes(b"x")
    import shutil

    shutil.rmtree(tmp_path / "task-1")  # what run_shipped's cleanup does
    try:
        worker._empty_scratch()
        assert str(gone) not in {str(p.parent) for p in worker._SCRATCH.values()}  # forgotten
        assert not any(worker._scratch("", BlobStore(kept)).iterdir())  # the live one was emptied
    finally:
        worker._SCRATCH.clear()


def test_a_worker_that_died_idle_is_replaced_before_the_next_task() -> None:
    """A real worker killed between tasks (after its result went back): the next task gets a new worker
    instead of 'worker died' charged to it."""
    import os
    import signal

    from trt_routes.execute.tasks import WarmupTask

    with LocalExecutor() as executor:
        first = executor.run(WarmupTask(backend="onnxruntime", spec=None), 60)  # type: ignore[arg-type]
        assert first.status == "ok", first
        assert executor._worker is not None
        pid = executor._worker.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        executor._worker._wait(5)
        second = executor.run(WarmupTask(backend="onnxruntime", spec=None), 60)  # type: ignore[arg-type]
    assert second.status == "ok", second
    assert executor.workers_started == 2


def test_a_task_the_worker_cannot_rebuild_is_answered_and_the_next_task_runs(tmp_path: Path) -> None:
    """A task whose class only the coordinator's script defines (its __main__) cannot be unpickled in a worker:
    it gets a crashed result that is the machine's (never cached as a route's), and the next task runs in a
    fresh worker."""
    import subprocess
    import sys

    script = tmp_path / "main_task.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "from dataclasses import dataclass\n"
        "from trt_routes.execute.tasks import TaskResult\n"
        "@dataclass(frozen=True)\n"
        "class Mine:\n"
        "    def execute(self):\n"
        "        return TaskResult(status='ok')\n"
        "if __name__ == '__main__':\n"
        "    from _exec_probe import EnvProbe\n"
        "    from trt_routes.execute.local import LocalExecutor\n"
        "    with LocalExecutor() as ex:\n"
        "        bad = ex.run(Mine(), 30)\n"
        "        good = ex.run(EnvProbe(), 30)\n"
        "    print(bad.status, bad.infrastructure, 'could not read its task' in bad.error, good.status,\n"
        "          ex.workers_started)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["crashed", "True", "True", "ok", "2"]


def test_a_worker_started_in_a_folder_that_shadows_the_standard_library_still_starts(tmp_path: Path) -> None:
    """A worker starts in the coordinator's folder; a user's json.py (or any module named like one the worker
    imports first) there must not take the standard library's place; a Path in sys.path breaks nothing."""
    import subprocess
    import sys

    shadow = tmp_path / "work"
    shadow.mkdir()
    for name in ("json", "pickle", "multiprocessing", "socket"):
        (shadow / f"{name}.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "where_probe.py").write_text(
        "from dataclasses import dataclass\nfrom trt_routes.execute.tasks import TaskResult\n"
        "@dataclass(frozen=True)\nclass Where:\n    def execute(self):\n        return TaskResult(status='ok')\n")
    script = tmp_path / "bin" / "run.py"
    script.parent.mkdir()
    script.write_text(
        "import sys\nfrom pathlib import Path\n"
        f"sys.path.append(Path({str(tmp_path / 'probes')!r}))  # not followed by imports; must not break a worker\n"
        f"sys.path.append({str(tmp_path / 'probes')!r})\n"
        "from where_probe import Where\n"
        "from trt_routes.execute.local import LocalExecutor\n"
        "with LocalExecutor() as ex:\n"
        "    print(ex.run(Where(), 60).status)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=shadow)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok"]


def _default_trial(tmp_path: Path, executor: LocalExecutor) -> Any:
    """The default route's TrialTask of a small project's first job, its reference run done on ``executor``."""
    from conftest import load_make_models

    from trt_routes.execute.tasks import reference_task
    from trt_routes.tune.trials import TrialRunner

    project = open_project(make_project(tmp_path / "p", load_make_models().write_models(tmp_path / "m")))
    job = project.jobs[0]
    ref = executor.run(reference_task(job, str(project.store.root)), 60)
    assert ref.status == "ok", ref
    runner = TrialRunner.__new__(TrialRunner)
    runner.store = project.store
    return runner.trial_task(job, "", (ref.inputs_sha256, ref.outputs_sha256))


def test_a_worker_killed_or_stopped_from_outside_is_not_cached_as_the_routes_fault(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 of a worker (here the build kills itself with SIGKILL, once) and kill -STOP (the build stops
    itself; the coordinator finds it stopped at the time limit) are the machine's doing: neither is cached as
    the route's `crashed` or `timeout`, and the next apply builds both routes again (the first now behaves)."""
    from _project import edit_manifest, routes_and_statuses

    from trt_routes.tune.apply import compute_plan

    monkeypatch.setenv("TRT_ROUTES_FAULT_MARKER", str(tmp_path / "killed-once"))
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty",
                            group="-fault=[none|kill-host-once|stop-self]")
    edit_manifest(manifest, lambda d: d["measurement"].update(timeout_s=8))
    messages: list[str] = []

    class Collect(SilentReporter):
        def message(self, text: str) -> None:
            messages.append(text)

    apply(open_project(manifest), ApplyOptions(only=["cnn/bs1/*"]), reporter=Collect())
    assert routes_and_statuses(manifest)["cnn/bs1/cpu"] == {"": "ok"}, messages
    assert any("-fault=kill-host-once: not cached: infrastructure: the worker was killed from outside "
               "(signal SIGKILL" in m for m in messages), messages
    assert any("-fault=stop-self: not cached: infrastructure: the worker was stopped from outside (SIGSTOP)" in m
               for m in messages), messages
    project = open_project(manifest)
    with project.open_cache() as cache:
        (jp,) = compute_plan(project, cache, project.read_lock(), ["cnn/bs1/*"]).jobs
    assert {"-fault=kill-host-once", "-fault=stop-self"} <= set(jp.to_build)
