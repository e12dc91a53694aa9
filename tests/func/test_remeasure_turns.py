"""Side-by-side re-measurement with ONNX Runtime loads each turn's engine afresh (``Backend.reload_each_turn``):
sessions kept loaded side by side slowed each other on a 2-core host (their intra-op threads spin after each
run), so one engine is loaded while it is timed. Real worker processes, real ONNX Runtime (the fault backend's
``-sleep_ms`` gives a clear winner), real SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest
from _project import edit_manifest, make_project

from trt_routes.backends.onnxruntime import OnnxRuntimeBackend
from trt_routes.cache import side_tables
from trt_routes.project import open_project
from trt_routes.selection.confirm import TURNS_RELOAD, remeasure_key
from trt_routes.tune.apply import ApplyOptions, apply, compute_plan

# busy checks off: on a loaded host a busy re-measurement is taken again (``BUSY_RETAKES``), which loads its engines
# again, and this file counts loads (its CI run failed with 90 loads for 34 while a benchmark ran beside it)
QUICK = {"warmup": 2, "iterations": 5, "repeats": 3, "timeout_s": 120, "busy": {"action": "ignore"}}


def test_onnxruntime_reloads_each_turn() -> None:
    assert OnnxRuntimeBackend.reload_each_turn


def test_each_turn_loads_its_engine_and_the_record_says_so(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    loads = tmp_path / "loads.txt"
    monkeypatch.setenv("TRT_ROUTES_FAULT_LOADS", str(loads))
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-sleep_ms=[0|8]", mode="full",
                            measurement=QUICK)
    edit_manifest(manifest, lambda d: d["strategies"]["s"].update(confirm={"rounds": 6, "iterations": 5}))
    result = apply(open_project(manifest), ApplyOptions(profile=False))  # counts the timing loads alone
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    assert {o.entry["route"] for o in result.outcomes if o.entry} == {"-sleep_ms=0"}  # confirmed over the default
    project = open_project(manifest)
    with project.open_cache() as cache:
        rows = [r for job in project.jobs for r in side_tables.remeasurements_for(cache, job.group_key)]
        trials = int(cache.conn.execute("SELECT count(*) FROM trials").fetchone()[0])
    assert rows and all(r["meta"]["turns"] == TURNS_RELOAD for r in rows), [r["meta"] for r in rows]
    # every trial loads its engine once; a re-measurement loads each engine once (its warm-up until settled
    # and the turns' sizing), then once more for every turn it times
    per_remeasure = [1 + len(r["challengers"]) + len(r["slots"]) for r in rows]
    assert len(loads.read_text().splitlines()) == trials + sum(per_remeasure), (trials, per_remeasure)
    # stored under the key the lookup reads: a plan afterwards re-measures nothing
    with project.open_cache() as cache:
        plan = compute_plan(project, cache, project.read_lock())
    assert {j.action for j in plan.jobs} == {"up-to-date"}, [(j.job.name, j.reasons) for j in plan.jobs]


def test_reloaded_turns_have_a_key_of_their_own_and_other_keys_read_as_before() -> None:
    from trt_routes.manifest.schema import Confirm

    before = remeasure_key("g", "", ["-a=1"], Confirm())
    assert remeasure_key("g", "", ["-a=1"], Confirm(), turns="") == before
    assert remeasure_key("g", "", ["-a=1"], Confirm(), turns=TURNS_RELOAD) != before
