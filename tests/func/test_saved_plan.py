"""Saved plans: `plan --out FILE` then `apply --plan FILE` executes exactly that plan, and refuses it (exit 2,
naming what changed) once the manifest, the lockfile, the trial cache, the jobs or the engines moved on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _project import cli, copy_project, edit_manifest, make_project

from trt_routes.lockfile import Lockfile
from trt_routes.plan.saved import PlanState, StalePlan, load_plan, plan_verifier
from trt_routes.project import open_project
from trt_routes.signature import Environment, detect
from trt_routes.tune.apply import apply


def test_apply_executes_exactly_the_saved_plan(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    saved = tmp_path / "plan.json"
    code, out = cli("plan", "--only", "cnn/bs1/*", "--out", str(saved), "-m", str(manifest))
    assert code == 0 and saved.is_file()
    data = json.loads(saved.read_text())
    assert data["format"] == "trt-routes-plan" and data["only"] == ["cnn/bs1/*"]
    assert data["lockfile"]["sha256"] == "" and data["cache"]["trials"] == 0
    assert len(data["manifest"]["sha256"]) == 64 and len(data["cache"]["digest"]) == 64
    assert [j["job"] for j in data["plan"]["jobs"]] == ["cnn/bs1/cpu"] and data["plan"]["builds"] == 5
    assert data["jobs"]["cnn/bs1/cpu"]["signature"] == open_project(manifest).jobs[0].signature.fields  # type: ignore[union-attr]

    code, out = cli("apply", "--plan", str(saved), "--json", "-m", str(manifest))
    assert code == 0, out
    result = json.loads(out)
    assert result["plan"]["jobs"] == data["plan"]["jobs"]  # the plan it ran is the plan that was saved
    assert result["built"] == 5 and [j["job"] for j in result["jobs"]] == ["cnn/bs1/cpu"]
    assert sorted(Lockfile.read(manifest.parent / "tuning.lock").jobs) == ["cnn/bs1/cpu"]

    # the world moved on: the same plan is now stale, and saying so changes nothing
    lock_before = (manifest.parent / "tuning.lock").read_text()
    code, out = cli("apply", "--plan", str(saved), "-m", str(manifest))
    assert code == 2, out
    assert f"saved plan {saved} is stale; since it was made:" in out
    assert "tuning.lock was created" in out
    assert "the trial cache changed (0 -> 5 trials)" in out
    assert f"hint: make a new plan with `trt-routes plan --out {saved}`" in out
    assert (manifest.parent / "tuning.lock").read_text() == lock_before


def test_a_changed_manifest_or_lockfile_makes_the_plan_stale(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    saved = tmp_path / "plan.json"
    assert cli("plan", "--out", str(saved), "-m", str(manifest))[0] == 0
    edit_manifest(manifest, lambda d: d["tolerances"]["t"]["checks"][0].update(threshold=1e-9))
    lock = manifest.parent / "tuning.lock"
    lock.write_text(lock.read_text() + "# edited\n")
    code, out = cli("apply", "--plan", str(saved), "-m", str(manifest))
    assert code == 2
    assert "manifest tuning.yaml changed (sha256" in out
    assert "tuning.lock changed (sha256" in out
    assert "cnn/bs1/cpu: tolerance changed" in out and "cnn/bs4/cpu: tolerance changed" in out
    assert "the trial cache changed" not in out


def test_a_plan_made_on_another_machine_is_stale_field_by_field(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    env = detect()
    other = Environment(cpu={**env.cpu, "cpu_model": "Some Other CPU"}, gpus=env.gpus)
    project = open_project(manifest, env=other)
    from trt_routes.plan.saved import save_plan
    from trt_routes.tune.apply import compute_plan

    saved = tmp_path / "plan.json"
    with project.open_cache() as cache:
        plan = compute_plan(project, cache, project.read_lock())
        save_plan(saved, project, plan, PlanState.of(project, cache))
    here = open_project(manifest)
    with pytest.raises(StalePlan) as info:
        apply(here, check_plan=plan_verifier(load_plan(saved), here))
    text = str(info.value)
    assert f"cnn/bs1/cpu: stale: cpu_model Some Other CPU -> {env.cpu['cpu_model']}" in text


def test_a_deleted_engine_changes_the_plan_itself(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    saved = tmp_path / "plan.json"
    code, out = cli("plan", "--check", "--out", str(saved), "-m", str(manifest))
    assert code == 0 and json.loads(saved.read_text())["plan"]["has_work"] is False
    (manifest.parent / "engines" / "cnn" / "bs1" / "cpu.onnx").unlink()
    code, out = cli("apply", "--plan", str(saved), "-m", str(manifest))
    assert code == 2
    assert "cnn/bs1/cpu: planned up-to-date (0 build(s)), now materialize (0 build(s)): engine missing" in out
    assert not (manifest.parent / "engines" / "cnn" / "bs1" / "cpu.onnx").exists()
    # a fresh plan of the same world applies
    assert cli("plan", "--out", str(saved), "-m", str(manifest))[0] == 0
    code, out = cli("apply", "--plan", str(saved), "-m", str(manifest))
    assert code == 0 and (manifest.parent / "engines" / "cnn" / "bs1" / "cpu.onnx").is_file()


def test_saved_plan_usage_errors(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    code, out = cli("apply", "--plan", str(manifest), "-m", str(manifest))
    assert code == 2 and "is not a saved trt-routes plan" in out and "Traceback" not in out
    code, out = cli("apply", "--plan", str(tmp_path / "none.json"), "-m", str(manifest))
    assert code == 2 and "no saved plan at" in out
    saved = tmp_path / "plan.json"
    assert cli("plan", "--out", str(saved), "-m", str(manifest))[0] == 0
    code, out = cli("apply", "--plan", str(saved), "--only", "cnn/*", "-m", str(manifest))
    assert code == 2 and "--only cannot be combined with --plan" in out
    data = json.loads(saved.read_text())
    data["version"] = 99
    saved.write_text(json.dumps(data))
    code, out = cli("apply", "--plan", str(saved), "-m", str(manifest))
    assert code == 2 and "plan format version 99 is newer" in out


def test_a_deeply_nested_saved_plan_is_a_clear_error(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    for depth in (100, 200_000):  # past the depth limit, and past Python's recursion limit
        deep = tmp_path / f"deep{depth}.json"
        deep.write_text('{"format": ' + "[" * depth + "]" * depth + "}")
        code, out = cli("apply", "--plan", str(deep), "-m", str(manifest))
        assert code == 2 and "nested deeper than" in out and str(deep) in out.replace("\n", "")
        assert "Traceback" not in out and "RecursionError" not in out
