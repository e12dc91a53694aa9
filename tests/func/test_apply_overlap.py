"""Jobs overlapping on several workers: the next job starts on a worker the running job leaves idle (its
last trials in flight), with the same trials and winners as one job after another; with one worker
nothing overlaps; a failure stops what overlapped without locking it."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _paths import TESTS
from _project import edit_manifest, make_project, routes_and_statuses

from trt_routes.execute.config import execution_config, prepare
from trt_routes.execute.tasks import RemeasureTask, TrialTask
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.tune.apply import ApplyOptions, ApplyResult, apply

TESTS = TESTS
#: the stand-in fault backend's -fault=slow sleeps 0.5 s before each round of timed runs: with the default
#: route, each job has a quick trial and a long one
GROUP = "-fault=[none|slow]"
#: the fixed warm-up only (settling would time the slow route many times over): each slow trial takes ~1 s
QUICK = {"warmup": 1, "iterations": 3, "repeats": 2, "timeout_s": 60, "settle": False}




class SpyExecutor:
    """The real executor apply would make, wrapped (a fake injected through ``apply(executor_factory=...)``):
    it records ('submit' | 'result' | 'remeasure' | 'remeasured', job name) for every trial and side-by-side
    re-measurement, in the order the coordinator submitted them and got them back."""

    def __init__(self, inner: Any, names: dict[tuple[str, str], str], seen: list[tuple[str, str]]) -> None:
        self.inner, self.names, self.seen = inner, names, seen
        self.tickets: dict[int, tuple[str, str]] = {}

    def __getattr__(self, name: str) -> Any:  # free_slots, queue_room, run, warm, close: the real executor's
        return getattr(self.inner, name)

    def __enter__(self) -> SpyExecutor:
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)

    def submit(self, task: Any, timeout: float) -> int:
        ticket: int = self.inner.submit(task, timeout)
        kind = {TrialTask: ("submit", "result"), RemeasureTask: ("remeasure", "remeasured")}.get(type(task))
        if kind is not None:
            name = self.names[(Path(task.spec.model_path).name, task.spec.shape)]
            self.seen.append((kind[0], name))
            self.tickets[ticket] = (kind[1], name)
        return ticket

    def wait(self) -> tuple[int, Any]:
        ticket, result = self.inner.wait()
        if ticket in self.tickets:
            self.seen.append(self.tickets.pop(ticket))
        return ticket, result


@pytest.fixture
def events() -> list[tuple[str, str]]:
    return []


def spied_apply(manifest: Path, workers: int, events: list[tuple[str, str]], reporter: Any = None) -> ApplyResult:
    """``apply`` with ``workers`` workers, its executor wrapped in a ``SpyExecutor`` writing to ``events``."""
    project = open_project(manifest)
    factory = prepare(project, execution_config(project, workers))
    names = {(Path(j.model_path).name, j.build_spec({}).shape): j.name for j in project.jobs}
    return apply(project, ApplyOptions(workers=workers), reporter=reporter,
                 executor_factory=lambda: SpyExecutor(factory(), names, events))  # type: ignore[arg-type,return-value]


def overlapped(events: list[tuple[str, str]]) -> list[str]:
    """Jobs whose first trial was submitted before the previous job's last result came in."""
    order = list(dict.fromkeys(name for kind, name in events if kind == "submit"))
    last_result = {name: i for i, (kind, name) in enumerate(events) if kind == "result"}
    first_submit = {name: events.index(("submit", name)) for name in order}
    return [b for a, b in itertools.pairwise(order) if first_submit[b] < last_result[a]]


def no_confirmation(d: dict[str, Any]) -> None:
    d["strategies"]["s"]["confirm"] = False  # a slow winner would be re-measured side by side, slowly


@pytest.mark.slow
def test_next_job_starts_beside_the_last_trials_and_tunes_the_same(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path], events: list[tuple[str, str]]) -> None:
    kw: dict[str, Any] = {"backend": "faulty", "group": GROUP, "mode": "full", "both_models": True,
                          "measurement": QUICK}
    one = make_project(tmp_path / "one", tiny_models, **kw)
    edit_manifest(one, no_confirmation)
    two = make_project(tmp_path / "two", tiny_models, **kw)
    edit_manifest(two, no_confirmation)
    r1 = spied_apply(one, 1, events)
    assert r1.exit_code == 0 and overlapped(events) == []  # one worker: one job after another
    events.clear()
    r2 = spied_apply(two, 2, events)
    assert r2.exit_code == 0
    jobs = [o.job.name for o in r2.outcomes]
    assert jobs == [o.job.name for o in r1.outcomes] == ["cnn/bs1/cpu", "cnn/bs4/cpu", "tb/s16/cpu"]
    assert overlapped(events), events  # each job's slow trial left a worker free for the next job
    # a job's first build runs alone: its second is submitted only after the first came back, or once the
    # next job had its own first build (a worker that frees while it runs goes to the next job)
    first = events.index(("submit", "cnn/bs1/cpu"))
    second = events.index(("submit", "cnn/bs1/cpu"), first + 1)
    assert ("result", "cnn/bs1/cpu") in events[first:second] or ("submit", "cnn/bs4/cpu") in events[:second], \
        events
    assert routes_and_statuses(one) == routes_and_statuses(two)
    assert all(routes == {"": "ok", "-fault=slow": "ok"} for routes in routes_and_statuses(two).values())
    for manifest in (one, two):
        assert sorted(Lockfile.read(manifest.parent / "tuning.lock").jobs) == sorted(jobs)


@pytest.mark.slow
def test_a_failure_stops_the_job_that_overlapped_it_without_locking_it(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path], events: list[tuple[str, str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ordered by files, not by timing (tests/fault_backend.py's gates): cnn's builds wait until tb's first
    build has started, and tb's builds wait until cnn has failed, so tb is running when cnn fails."""
    import onnxruntime as ort

    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "cnn.waitfor").write_text("tb.started")
    (gates / "tb.waitfor").write_text("cnn.failed")
    monkeypatch.setenv("TRT_ROUTES_FAULT_GATES", str(gates))
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group=GROUP,
                            mode="full", both_models=True, measurement=QUICK)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    y = ort.InferenceSession(str(manifest.parent / "models" / "cnn.onnx")).run(None, {"input": x})[0]
    np.savez(manifest.parent / "in.npz", input=x)
    np.savez(manifest.parent / "out.npz", logits=y + 1.0)  # wrong on purpose: every cnn route fails the gate

    def wrong_reference(d: dict[str, Any]) -> None:
        d["models"]["cnn"]["shapes"] = {"bs1": {"input": [1, 3, 32, 32]}}
        d["models"]["cnn"]["reference"] = {"inputs": "in.npz", "outputs": "out.npz"}

    edit_manifest(manifest, wrong_reference)
    messages: list[str] = []

    class Messages:  # a reporter: apply tells it each job's outcome as the job finishes, before going on
        def __getattr__(self, name: str) -> Any:
            return messages.append if name == "message" else (lambda *a: None)

        def job_done(self, outcome: Any) -> None:
            if outcome.job.name == "cnn/bs1/cpu" and outcome.error:
                (gates / "cnn.failed").touch()  # tb's build, waiting in its worker, goes on

    result = spied_apply(manifest, 2, events, reporter=Messages())
    assert result.exit_code == 4 and result.stopped_early
    assert [(o.job.name, bool(o.error)) for o in result.outcomes] == [("cnn/bs1/cpu", True)]
    assert overlapped(events) == ["tb/s16/cpu"]
    assert any(m.startswith("tb/s16/cpu: stopped after another job failed") for m in messages), messages
    cached = routes_and_statuses(manifest)
    assert len(cached["cnn/bs1/cpu"]) == 2 and cached["tb/s16/cpu"]  # what ran is kept for the next apply
    lock = manifest.parent / "tuning.lock"
    assert not lock.exists() or not Lockfile.read(lock).jobs  # neither job was locked
    # the next apply resumes: only what the stopped job still lacks is built, then it is locked
    monkeypatch.delenv("TRT_ROUTES_FAULT_GATES")
    edit_manifest(manifest, lambda d: d["models"].pop("cnn"))
    again = apply(open_project(manifest), ApplyOptions(workers=2))
    assert again.exit_code == 0
    assert again.built == 2 - len(cached["tb/s16/cpu"])
    assert list(Lockfile.read(lock).jobs) == ["tb/s16/cpu"]


@pytest.mark.slow
def test_other_jobs_trials_go_on_while_a_job_confirms_its_winner(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path], events: list[tuple[str, str]]) -> None:
    """A finished search's side-by-side re-measurement is a task like a trial: while it runs in one worker,
    the other jobs' trials run and are recorded in the other (it used to hold the coordinator)."""
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-sleep_ms=[0|8]", mode="full",
                            both_models=True, measurement=QUICK)
    # each re-measurement takes a few seconds: 10 rounds of at least 100 ms per route
    edit_manifest(manifest, lambda d: d["strategies"]["s"].update(confirm={"rounds": 10, "slot_ms": 100}))
    result = spied_apply(manifest, 2, events)
    assert result.exit_code == 0
    assert all(o.selection is not None and o.selection.confirmation for o in result.outcomes)
    assert {o.entry["route"] for o in result.outcomes if o.entry} == {"-sleep_ms=0"}  # confirmed over the default
    during = []  # results of one job recorded while another job's re-measurement ran
    for i, (kind, name) in enumerate(events):
        if kind == "remeasure":
            end = events.index(("remeasured", name), i)
            during += [other for k, other in events[i:end] if k == "result" and other != name]
    assert during, events


def test_references_run_side_by_side(tmp_path: Path, tiny_models: dict[str, Path],
                                     submitted_tasks: list[str]) -> None:
    """With two workers the second job starts on the worker the first job's reference leaves free: both
    references run side by side before any trial, instead of each alone at the start of its job."""
    manifest = make_project(tmp_path / "p", tiny_models, mode="fast")
    result = apply(open_project(manifest), ApplyOptions(workers=2))
    assert result.exit_code == 0 and len(result.outcomes) >= 2
    references = submitted_tasks.count("ReferenceTask")
    assert references == len({o.job.reference_key for o in result.outcomes}) >= 2
    assert submitted_tasks[:references] == ["ReferenceTask"] * references and "TrialTask" in submitted_tasks


def test_jobs_with_one_reference_compute_it_once(tmp_path: Path, tiny_models: dict[str, Path],
                                                 submitted_tasks: list[str]) -> None:
    """Two model entries of one file and shape (two switch groups, say) share their reference: the second
    job, started beside the first while its reference runs, waits for that run instead of repeating it."""
    submitted = submitted_tasks
    manifest = make_project(tmp_path / "p", tiny_models, mode="fast")

    def twin(d: dict[str, Any]) -> None:
        d["models"]["cnn"]["shapes"] = {"bs1": {"input": [1, 3, 32, 32]}}
        d["switch_groups"]["other"] = "-enable_mem_pattern=[0|1]"
        d["models"]["twin"] = {**d["models"]["cnn"], "switch_group": "other"}

    edit_manifest(manifest, twin)
    started: dict[str, int] = {}  # job -> tasks submitted when it started

    class Starts:
        def job_start(self, job: Any, builds: int) -> None:
            started[job.name] = len(submitted)

        def __getattr__(self, name: str) -> Any:
            return lambda *a: None

    result = apply(open_project(manifest), ApplyOptions(workers=2), reporter=Starts())  # type: ignore[arg-type]
    assert result.exit_code == 0
    assert started == {"cnn/bs1/cpu": 0, "twin/bs1/cpu": 1}  # the twin started while the reference ran
    assert [o.job.name for o in result.outcomes] == ["cnn/bs1/cpu", "twin/bs1/cpu"]
    assert result.outcomes[0].job.reference_key == result.outcomes[1].job.reference_key
    assert submitted.count("ReferenceTask") == 1 and submitted[0] == "ReferenceTask"
