"""End-to-end tuning with real ONNX Runtime: apply, re-apply, reselect, new routes, stale models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from _project import copy_project, edit_manifest, make_project

from trt_routes.audit.explain import explain
from trt_routes.canonical import file_sha256
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.tune.apply import ApplyOptions, apply, compute_plan


def plan_of(manifest: Path):  # type: ignore[no-untyped-def]
    project = open_project(manifest)
    with project.open_cache() as cache:
        return compute_plan(project, cache, project.read_lock())


def trial_rows(manifest: Path) -> dict[str, tuple[str, list[float]]]:
    project = open_project(manifest)
    with project.open_cache() as cache:
        return {t.id: (t.created_at, t.samples) for t in cache.all_trials()}


def test_first_apply_tunes_every_job_and_locks(tuned: Path) -> None:
    lock = Lockfile.read(tuned.parent / "tuning.lock")
    assert sorted(lock.jobs) == ["cnn/bs1/cpu", "cnn/bs4/cpu"]
    for entry in lock.jobs.values():
        # fast = baseline + one route per non-default value: basic; threads 1, 2 (default 0); Nchwc on
        assert entry["trials"]["candidates"] == 5
        assert entry["trials"]["built"] == 5
        engine = tuned.parent / entry["engine"]["path"]
        assert engine.is_file() and file_sha256(engine) == entry["engine"]["sha256"]
        assert entry["timing"]["default_ms"] > 0 and entry["timing"]["chosen_ms"] > 0
        timing = entry["timing"]
        if timing["speedup_basis"] == "raw-medians":  # no side-by-side run: the ratio of the medians
            assert timing["speedup"] == pytest.approx(timing["default_ms"] / timing["chosen_ms"], rel=1e-3)
        else:  # the headline is the confirmed side-by-side ratio, not the raw one
            assert timing["speedup_basis"] == "side-by-side"
            results = (entry["selection"]["confirmation"]["vs_default"] or {}).get("results") or []
            mine = [r for r in results if r["route"] == entry["route"]]
            # the lock keeps 6 significant digits (4 for facts): equal to that rounding
            assert timing["speedup"] == (pytest.approx(1 / mine[0]["ratio"], rel=1e-5) if mine else 1.0)
        assert set(entry["losses"]["logits"]) >= {"cos", "lInf", "l1", "l2"}
        # the engine is a loadable ONNX model (ORT's optimized graph)
        onnx.load(str(engine))


def test_second_apply_builds_nothing_and_plan_is_empty(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    lock_before = (manifest.parent / "tuning.lock").read_text()
    rows_before = trial_rows(manifest)
    result = apply(open_project(manifest))
    assert result.built == 0
    assert all(o.action == "up-to-date" for o in result.outcomes)
    assert not result.lock_written
    assert (manifest.parent / "tuning.lock").read_text() == lock_before
    assert trial_rows(manifest) == rows_before
    assert not plan_of(manifest).has_work


def test_tightened_tolerance_reselects_without_building(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    rows_before = trial_rows(manifest)

    def tighten(d: dict) -> None:  # type: ignore[type-arg]
        d["tolerances"]["t"]["checks"][0]["threshold"] = 1e-9

    edit_manifest(manifest, tighten)
    plan = plan_of(manifest)
    assert {jp.action for jp in plan.jobs} == {"reselect"}
    assert all("tolerance 't' changed: cos<0.0001" in jp.reasons[0] and "cos<1e-09" in jp.reasons[0]
               for jp in plan.jobs)
    assert plan.builds == 0
    result = apply(open_project(manifest))
    assert result.exit_code == 0 and result.built == 0
    assert trial_rows(manifest) == rows_before
    lock = Lockfile.read(manifest.parent / "tuning.lock")
    assert all(e["tolerance"]["checks"][0]["threshold"] == 1e-9 for e in lock.jobs.values())
    assert not plan_of(manifest).has_work


def test_new_knob_value_plans_only_routes_that_contain_it(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    edit_manifest(manifest, lambda d: d["switch_groups"].update(
        g=d["switch_groups"]["g"].replace("[1|2]", "[1|2|3]")))
    plan = plan_of(manifest)
    for jp in plan.jobs:
        assert jp.action == "tune"
        assert jp.to_build == ("-intra_op_num_threads=3",)
        assert jp.reused == 5
        assert "not measured yet: -intra_op_num_threads=3" in jp.reasons[0]
    result = apply(open_project(manifest))
    assert result.built == 2


def test_changed_weights_make_the_model_stale(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    model_path = manifest.parent / "models" / "cnn.onnx"
    model = onnx.load(str(model_path))
    init = model.graph.initializer[0]
    arr = onnx.numpy_helper.to_array(init).copy()
    arr.flat[0] += 1.0
    init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    onnx.save(model, str(model_path))
    plan = plan_of(manifest)
    assert all(jp.action == "tune" and jp.reasons[0] == "model digest changed" for jp in plan.jobs)
    assert all(len(jp.to_build) == 5 for jp in plan.jobs)


def test_explain_lists_every_trial_with_a_verdict(tuned: Path) -> None:
    ex = explain(open_project(tuned), "cnn/bs4/cpu")
    assert ex.selection is not None
    data = ex.to_json()
    assert len(data["trials"]) == 5
    routes = {t["route"] for t in data["trials"]}
    assert "" in routes and "-intra_op_num_threads=1" in routes
    winners = [t for t in data["trials"] if t["verdict"].startswith("winner")]
    assert len(winners) == 1 and winners[0]["route"] == data["winner"]
    for t in data["trials"]:
        assert t["status"] == "ok" and t["median_ms"] > 0 and "logits" in t["losses"]
        assert t["verdict"]
    assert data["history"] and data["history"][0]["reason"] == "first lock"


def test_dry_run_lists_routes_and_builds_nothing(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, mode="full")
    result = apply(open_project(manifest), ApplyOptions(dry_run=True))
    # full product of three 2-value lists (8), plus the default route (threads=0 is in no list)
    assert [len(jp.to_build) for jp in result.plan.jobs] == [9, 9]
    assert all("" in jp.to_build for jp in result.plan.jobs)
    assert trial_rows(manifest) == {}
    assert not (manifest.parent / "tuning.lock").exists()


def test_only_pattern_limits_the_jobs(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    result = apply(open_project(manifest), ApplyOptions(only=["*/bs1/*"]))
    assert [o.job.name for o in result.outcomes] == ["cnn/bs1/cpu"]
    assert sorted(Lockfile.read(manifest.parent / "tuning.lock").jobs) == ["cnn/bs1/cpu"]


def test_reference_files_that_disagree_fail_the_gate(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    import onnxruntime as ort

    manifest = make_project(tmp_path / "p", tiny_models)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    sess = ort.InferenceSession(str(manifest.parent / "models" / "cnn.onnx"))
    y = sess.run(None, {"input": x})[0]
    np.savez(manifest.parent / "in.npz", input=x)
    np.savez(manifest.parent / "out.npz", logits=y + 1.0)  # wrong on purpose

    def use_files(d: dict) -> None:  # type: ignore[type-arg]
        d["models"]["cnn"]["shapes"] = {"bs1": {"input": [1, 3, 32, 32]}}
        d["models"]["cnn"]["reference"] = {"inputs": "in.npz", "outputs": "out.npz"}

    edit_manifest(manifest, use_files)
    result = apply(open_project(manifest), ApplyOptions(keep_going=True))
    assert result.exit_code == 4
    (outcome,) = result.outcomes
    assert outcome.error and "no eligible route" in outcome.error
    assert outcome.selection is not None
    assert all("failed accuracy gate: logits: cos" in v.reason for v in outcome.selection.verdicts)
    assert not (manifest.parent / "tuning.lock").exists() or \
        "cnn/bs1/cpu" not in Lockfile.read(manifest.parent / "tuning.lock").jobs

    # the right reference makes the same trials eligible after a rebuild under the new reference key
    np.savez(manifest.parent / "out.npz", logits=y)
    plan = plan_of(manifest)
    assert plan.jobs[0].action == "tune" and "reference data changed" in plan.jobs[0].reasons
    assert apply(open_project(manifest)).exit_code == 0


def test_reference_key_follows_the_model_dtype_setting(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    import dataclasses

    manifest = make_project(tmp_path / "p", tiny_models)
    job = open_project(manifest).jobs[0]
    fp16 = dataclasses.replace(job, settings={"dtype": "float16"})
    fp32 = dataclasses.replace(job, settings={"dtype": "float32"})
    assert len({job.reference_key, fp16.reference_key, fp32.reference_key}) == 3
    assert dataclasses.replace(job, settings={"other": 1}).reference_key == job.reference_key
