"""Every miss explains itself field by field: a different machine or backend names the signature fields
that changed (old -> new), a new model says "model digest changed", in `plan` and in `plan --json`."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from _project import copy_project
from typer.testing import CliRunner

from trt_routes.cli.app import app
from trt_routes.plan.diff import Plan
from trt_routes.project import Project, open_project
from trt_routes.signature import Environment, detect
from trt_routes.tune.apply import compute_plan

runner = CliRunner()


def plan_of(project: Project) -> Plan:
    with project.open_cache() as cache:
        return compute_plan(project, cache, project.read_lock())


def moved_machine() -> Environment:
    env = detect()
    return Environment(cpu={**env.cpu, "cpu_count": "97", "cpu_model": "Other CPU 9000"}, gpus=env.gpus)


def test_another_machine_names_each_changed_signature_field(tuned: Path) -> None:
    here = detect().cpu
    plan = plan_of(open_project(tuned, env=moved_machine()))
    for jp in plan.jobs:
        assert jp.action == "tune" and len(jp.to_build) == 5
        assert jp.reasons[0] == (f"stale: cpu_count {here['cpu_count']} -> 97; "
                                 f"cpu_model {here['cpu_model']} -> Other CPU 9000")


def test_without_a_lock_entry_the_cache_history_explains_the_miss(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    (manifest.parent / "tuning.lock").unlink()
    plan = plan_of(open_project(manifest, env=moved_machine()))
    assert all(jp.reasons[0].startswith("stale: cpu_count ") and "cpu_model" in jp.reasons[0] for jp in plan.jobs)


def test_backend_upgrade_names_the_version(tuned: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trt_routes.backends.onnxruntime import OnnxRuntimeBackend

    software = OnnxRuntimeBackend.software
    old = software(OnnxRuntimeBackend())["backend_version"]
    monkeypatch.setattr(OnnxRuntimeBackend, "software", lambda self: {**software(self), "backend_version": "99.1.0"})
    plan = plan_of(open_project(tuned))
    assert all(jp.reasons[0] == f"stale: backend_version {old} -> 99.1.0" for jp in plan.jobs)


def test_plan_json_carries_the_reasons(tuned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    monkeypatch.setattr("trt_routes.project.detect", moved_machine)
    result = runner.invoke(app, ["plan", "--json", "-m", str(manifest)])
    assert result.exit_code == 0
    jobs = json.loads(result.output)["jobs"]
    assert {j["job"] for j in jobs} == {"cnn/bs1/cpu", "cnn/bs4/cpu"}
    for j in jobs:
        assert j["action"] == "tune"
        assert any(r.startswith("stale: cpu_count ") and "cpu_model " in r and " -> Other CPU 9000" in r
                   for r in j["reasons"])
    result = runner.invoke(app, ["plan", "-m", str(manifest)])  # the table shows the same words
    assert "stale: cpu_count" in result.output and "Other CPU 9000" in result.output


def test_new_model_bytes_say_model_digest_changed_in_json(tuned: Path, tmp_path: Path) -> None:
    manifest = copy_project(tuned, tmp_path / "p")
    path = manifest.parent / "models" / "cnn.onnx"
    model = onnx.load(str(path))
    model.doc_string = "retrained"
    onnx.save(model, str(path))
    result = runner.invoke(app, ["plan", "--json", "--check", "-m", str(manifest)])
    assert result.exit_code == 1
    assert all(j["reasons"] == ["model digest changed"] for j in json.loads(result.output)["jobs"])
