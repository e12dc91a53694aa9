"""Models that real exporters produce tune end to end: external data (same folder or a subfolder), both
torch.onnx exporters, int64 ``input_ids`` with dynamic axes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _project import write_manifest
from _real_models import export, external_data_mlp, rewrite_weights

from trt_routes.execute import remote
from trt_routes.execute.local import LocalExecutor
from trt_routes.files.artifacts import BlobStore
from trt_routes.files.model_files import read_model_files
from trt_routes.project import open_project
from trt_routes.tune.apply import SilentReporter
from trt_routes.tune.trials import TrialRunner

SMALL = {"warmup": 2, "iterations": 3, "repeats": 3, "timeout_s": 120, "settle": False}


def manifest(root: Path, models: dict[str, Any], group: str = "-graph_optimization_level=[basic|all]") -> Path:
    return write_manifest(root, {
        "schema_version": 1, "measurement": SMALL,
        "switch_groups": {"g": group}, "strategies": {"s": {"mode": "fast", "confirm": False}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"backend": "onnxruntime", "switch_group": "g", "strategy": "s", "tolerance": "t"},
        "models": models})


def trt_routes(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trt_routes.cli.app", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("location", ["mlp.onnx.data", "weights/mlp.bin"])
def test_the_model_digest_covers_the_external_data(tmp_path: Path, location: str) -> None:
    model = external_data_mlp(tmp_path / "m", location=location)
    files = read_model_files(model)
    assert [rel for rel, _ in files.files] == ["mlp.onnx", location]
    before = files.digest
    rewrite_weights(model, seed=1)
    assert read_model_files(model).digest != before
    (tmp_path / "m" / location).unlink()
    with pytest.raises(Exception, match=f"external data file not found: .*{Path(location).name}"):
        read_model_files(model)


def test_a_model_without_external_data_keeps_its_file_digest(tiny_models: dict[str, Path]) -> None:
    from trt_routes.canonical import file_sha256

    path = tiny_models["resnet_like"]
    assert read_model_files(path).digest == file_sha256(path)  # caches made before stay valid


def test_an_external_data_model_tunes_and_new_weights_make_it_stale(tmp_path: Path) -> None:
    root = tmp_path / "p"
    model = external_data_mlp(root / "models", location="weights/mlp.onnx.data")
    write = manifest(root, {"mlp": {"path": "models/mlp.onnx", "shapes": {
        "dyn": {"x": {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}}}}})
    done = trt_routes("apply", "--json", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    with open_project(write).open_cache() as cache:
        statuses = {t.route: t.status for t in cache.all_trials()}
    assert statuses and set(statuses.values()) == {"ok"}, statuses
    # the engines are self-contained: they load from the blob store, where no .data file lies
    assert "mlp/dyn/cpu" in (root / "tuning.lock").read_text()
    assert not [p for p in (root / "caches").rglob("*") if p.suffix == ".data"]
    assert trt_routes("plan", "--check", cwd=root).returncode == 0
    # only the .data bytes change: the job is stale because the model digest changed
    rewrite_weights(model, seed=7)
    planned = trt_routes("plan", cwd=root)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "model digest changed" in planned.stdout, planned.stdout



def test_a_project_kept_between_plan_and_apply_tunes_the_weights_of_now(tmp_path: Path) -> None:
    """trt_routes.api keeps a Project between calls: an apply after the model was re-exported measures and locks
    the new weights under their own digest, not the one the earlier plan resolved (apply resolves its jobs
    again whenever it sets up its executor)."""
    import sqlite3

    from trt_routes import api

    root = tmp_path / "p"
    model = external_data_mlp(root / "models")
    write = manifest(root, {"mlp": {"path": "models/mlp.onnx", "shapes": {"b4": {"x": [4, 16]}}}})
    project = api.open_project(write)
    before = project.jobs[0].model_digest
    assert {jp.action for jp in api.plan(project).jobs} == {"tune"}
    rewrite_weights(model, seed=7)
    now = open_project(write).jobs[0].model_digest
    assert now != before
    assert api.apply(project).exit_code == 0
    con = sqlite3.connect(project.cache_path)
    try:
        assert {r[0] for r in con.execute("SELECT model_digest FROM trials")} == {now}
    finally:
        con.close()
    assert now in (root / "tuning.lock").read_text() and before not in (root / "tuning.lock").read_text()

@pytest.fixture
def node_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    node = tmp_path / "node"
    monkeypatch.setenv("TRT_ROUTES_NODE_DIR", str(node))
    yield node
    remote.close_hosted()


def test_a_shipped_trial_takes_the_external_data_with_it(tmp_path: Path, node_dir: Path) -> None:
    root = tmp_path / "p"
    external_data_mlp(root / "models", location="w/mlp.data")
    project = open_project(manifest(root, {"mlp": {"path": "models/mlp.onnx", "shapes": {"b2": {"x": [2, 16]}}}}))
    job = project.jobs[0]
    with project.open_cache() as cache, LocalExecutor() as executor:
        runner = TrialRunner(project, cache, SilentReporter(), executor)
        ref = runner.reference(job)
        task = runner.trial_task(job, "-graph_optimization_level=all", ref)
    shipment, blobs = remote.ship(task)
    assert [rel for rel, _ in shipment.side_files] == ["w/mlp.data"]
    assert len(blobs) == 2 + len(ref)
    payload = [p.read_bytes() for _, p in blobs]
    local, scratch = remote.stage(shipment, payload, node_dir)
    assert (Path(local.spec.model_path).parent / "w" / "mlp.data").read_bytes() == payload[1]
    shutil.rmtree(scratch)
    result, produced = remote.run_shipped(shipment, 60, {}, payload, job.target_data["device"])
    assert result.status == "ok", result.error
    fresh = BlobStore(tmp_path / "coordinator")
    remote.receive(result, produced, fresh)
    assert fresh.verify(result.engine_sha256)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("kind", ["resnet", "bert"])
def test_torch_exported_models_tune(tmp_path: Path, kind: str, dynamo: bool) -> None:
    root = tmp_path / "p"
    path = export(kind, root / "models", dynamo=dynamo)
    if dynamo:
        assert read_model_files(path).side, "the new exporter was asked for external data"
    if kind == "resnet":
        spec: dict[str, Any] = {"shapes": {"dyn": {"input": {"min": [1, 3, 32, 32], "opt": [2, 3, 32, 32],
                                                             "max": [4, 3, 32, 32]}}}}
    else:
        spec = {"shapes": {"dyn": {"input_ids": {"min": [1, 4], "opt": [2, 8], "max": [4, 16]}}},
                "inputs": {"input_ids": {"dtype": "int64", "low": 0, "high": 50}}}
    manifest(root, {kind: {"path": f"models/{kind}.onnx", **spec}})
    done = trt_routes("apply", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    with open_project(root / "tuning.yaml").open_cache() as cache:
        assert {t.status for t in cache.all_trials()} == {"ok"}
