"""``max_minutes`` honoured per job by estimate (issue 17 item 2): a knob's ``cost`` says how much longer it
makes a build, adaptive screens the cheapest builds first, and a build whose estimate (its cost times the
default route's build time) exceeds the time left is not started; plan says the same as apply. Real
ONNX Runtime builds through the fault backend, whose ``-build_ms`` makes every build take 1.5 s and whose
``-costly`` declares a cost of 50 (its estimate is 50 times the baseline's build)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from _project import edit_manifest, make_project

from trt_routes import api
from trt_routes.audit.explain import explain
from trt_routes.project import open_project
from trt_routes.tune.apply import ApplyOptions, apply

GROUP = "-build_ms=1500 -costly=[0|1] -sleep_ms=[4|2]"


def budgeted(tmp_path: Path, tiny_models: dict[str, Path], max_minutes: float | None) -> Path:
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group=GROUP, mode="adaptive",
                            measurement={"warmup": 1, "iterations": 3, "repeats": 1, "timeout_s": 60})

    def limit(data: dict[str, Any]) -> None:
        if max_minutes is not None:
            data["strategies"]["s"]["max_minutes"] = max_minutes
        data["models"]["cnn"]["shapes"] = {"bs1": data["models"]["cnn"]["shapes"]["bs1"]}

    edit_manifest(manifest, limit)
    return manifest


def built_routes(manifest: Path) -> set[str]:
    with open_project(manifest).open_cache() as cache:
        return {t.route for t in cache.trials_for_job("cnn/bs1/cpu")}


def test_a_build_estimated_past_max_minutes_is_not_started_and_plan_agrees(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = budgeted(tmp_path, tiny_models, max_minutes=1.0)
    (planned,) = api.plan(open_project(manifest)).jobs
    assert any(r.startswith("max_minutes 1: the search stops") for r in planned.reasons)  # not just a count
    result = apply(open_project(manifest), ApplyOptions())
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    # the default route, the group's baseline (1.5 s) and the cheap screen ran; -costly=1 would need
    # about 50 x 1.5 s = 75 s of the 60
    assert built_routes(manifest) == {"", "-build_ms=1500", "-build_ms=1500 -sleep_ms=2"}
    (job,) = api.plan(open_project(manifest)).jobs
    assert not job.to_build and job.action != "tune"  # plan agrees: nothing more to build
    lines = explain(open_project(manifest), "cnn/bs1/cpu").decision
    note = next(line for line in lines if "stopped at its budget" in line)
    assert "-costly=1" in note and "raise it to search further" in note
    needs = re.search(r"needs about (\d+\.\d)", note)
    assert needs is not None and float(needs.group(1)) >= 1.2  # 50 x at least 1.5 s, in minutes


def test_without_a_time_budget_the_costly_knob_is_screened(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = budgeted(tmp_path, tiny_models, max_minutes=None)
    result = apply(open_project(manifest), ApplyOptions())
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    assert "-build_ms=1500 -costly=1" in built_routes(manifest)
