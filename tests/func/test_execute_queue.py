"""One worker with a task queued behind the running one: the worker starts it the moment it is done,
a failure in front of it hands it to the replacement worker, and apply queues only routes its search
wants whatever comes back, so queueing changes nothing about what is measured."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from _exec_probe import EnvProbe
from _paths import REPO

from trt_routes.backends.replay import ENV_VAR
from trt_routes.execute.local import LocalExecutor
from trt_routes.project import open_project
from trt_routes.tune.apply import apply

LANDSCAPES = REPO / "bench" / "landscapes"


def test_a_queued_task_starts_as_soon_as_the_running_one_ends() -> None:
    with LocalExecutor() as executor:
        assert (executor.free_slots(None), executor.queue_room(None)) == (1, 0)
        first = executor.submit(EnvProbe(sleep_s=0.3, label="first"), 60)
        assert (executor.free_slots(None), executor.queue_room(None)) == (0, 1)
        second = executor.submit(EnvProbe(label="second"), 60)
        assert executor.queue_room(None) == 0
        ticket, a = executor.wait()
        time.sleep(1.0)  # the coordinator is busy with the first result
        before_asking = time.time()
        ticket2, b = executor.wait()
    assert (ticket, ticket2) == (first, second)
    assert b.meta["pid"] == a.meta["pid"] and executor.workers_started == 1
    assert a.meta["end"] <= b.meta["start"] < before_asking  # it ran while the coordinator was busy


@pytest.mark.parametrize(("fault", "status"), [({"status": "build-error"}, "build-error"),
                                               ({"segfault": True}, "crashed"),
                                               ({"sleep_s": 30.0}, "timeout")])
def test_a_task_queued_behind_a_failure_runs_on_the_replacement_worker(fault: dict[str, Any], status: str) -> None:
    with LocalExecutor() as executor:
        executor.submit(EnvProbe(label="bad", **fault), 3)
        executor.submit(EnvProbe(label="next"), 60)
        _, bad = executor.wait()
        _, following = executor.wait()
    assert bad.status == status
    assert following.status == "ok" and following.meta["label"] == "next"
    assert executor.workers_started == 2


def replay_project(root: Path, landscape: Path) -> Path:
    root.mkdir()
    (root / "tuning.yaml").write_text(f"""
schema_version: 1
measurement: {{warmup: 0, iterations: 20, repeats: 5, timeout_s: 60, settle: false}}
switch_groups: {{g: "{json.loads(landscape.read_text())["meta"]["expression"]}"}}
strategies: {{s: {{mode: adaptive, confirm: false}}}}
tolerances: {{t: {{checks: [{{metric: cos, threshold: 1.0e-4}}]}}}}
defaults: {{backend: replay, switch_group: g, strategy: s, tolerance: t}}
models: {{m: {{path: {landscape}, shapes: {{a: {{x: [1]}}}}}}}}
""")
    return root / "tuning.yaml"


class Recording(LocalExecutor):
    """The local executor, noting how many tasks were in flight when each was submitted."""

    def __init__(self) -> None:
        super().__init__()
        self.queued_ahead = 0

    def submit(self, task: Any, timeout: float) -> int:
        self.queued_ahead += bool(self._piped or self._waiting)
        return super().submit(task, timeout)


@pytest.mark.parametrize("name", ["ort-resnet-bs8", "ort-transformer-s32", "launch-bound-gpu",
                                  "torch-inductor-h200-encoder-jit"])
def test_apply_queues_only_what_the_search_wants_anyway(name: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The adaptive search over a replayed landscape (deterministic timings): the same trials and winner
    with routes queued ahead as without, through every phase (screening, combination, descent, sweeps)."""
    landscape = LANDSCAPES / f"{name}.json"
    monkeypatch.setenv(ENV_VAR, str(landscape))
    runs: dict[str, tuple[set[str], str | None, int]] = {}
    for run, room in (("queued", None), ("one at a time", 0)):
        if room is not None:
            monkeypatch.setattr(LocalExecutor, "queue_room", lambda self, target: 0)
        executor = Recording()
        result = apply(open_project(replay_project(tmp_path / run.replace(" ", "-"), landscape)),
                       executor_factory=lambda executor=executor: executor)
        assert result.exit_code == 0, [o.error for o in result.outcomes]
        with open_project(tmp_path / run.replace(" ", "-") / "tuning.yaml").open_cache() as cache:
            routes = {t.route for t in cache.all_trials()}
        runs[run] = (routes, result.outcomes[0].selection.winner, executor.queued_ahead)  # type: ignore[union-attr]
    assert runs["queued"][:2] == runs["one at a time"][:2]
    trials = len(runs["queued"][0])
    # a step that proposes two or more routes has all but the first queued behind a running trial
    assert runs["queued"][2] >= 3 and runs["one at a time"][2] == 0
    assert trials < len(json.loads(landscape.read_text())["routes"])  # adaptive: fewer than the landscape's
