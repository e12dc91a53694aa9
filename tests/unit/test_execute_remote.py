"""The node side of the Ray executor without Ray: a task shipped as bytes (no shared disk) is staged on a
"node" folder, runs unchanged in an isolated worker, and its engine and outputs come back as bytes."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from _project import make_project

from trt_routes.execute import remote
from trt_routes.execute.local import LocalExecutor
from trt_routes.execute.tasks import RemeasureTask
from trt_routes.files.artifacts import BlobStore
from trt_routes.jobs import Job
from trt_routes.project import open_project
from trt_routes.routes import route_dict
from trt_routes.tune.apply import SilentReporter
from trt_routes.tune.trials import TrialRunner


@pytest.fixture
def node_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    node = tmp_path / "node"
    monkeypatch.setenv("TRT_ROUTES_NODE_DIR", str(node))
    yield node
    remote.close_hosted()


@contextlib.contextmanager
def coordinator(tmp_path: Path, tiny_models: dict[str, Path]) -> Iterator[tuple[Job, TrialRunner]]:
    """The coordinator's side: the first job of a fresh project and the trial runner apply holds (local worker)."""
    project = open_project(make_project(tmp_path / "p", tiny_models))
    with project.open_cache() as cache, LocalExecutor() as executor:
        yield project.jobs[0], TrialRunner(project, cache, SilentReporter(), executor)


def test_a_shipped_trial_runs_on_a_node_that_shares_no_files(
        node_dir: Path, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    with coordinator(tmp_path, tiny_models) as (job, runner):
        ref = runner.reference(job)
        task = runner.trial_task(job, "-graph_optimization_level=basic", ref)
    shipment, blobs = remote.ship(task)
    assert [sha for sha, _ in blobs] == [shipment.model_sha, *ref]
    payload = [path.read_bytes() for _, path in blobs]
    result, produced = remote.run_shipped(shipment, 60, {}, payload, job.target_data["device"])
    assert result.status == "ok", result.error
    assert set(produced) == {result.engine_sha256, result.outputs_sha256}
    # the node staged into a private folder of its own per task, and left nothing behind
    assert (node_dir.stat().st_mode & 0o777) == 0o700 and not any(node_dir.iterdir())
    fresh = BlobStore(tmp_path / "coordinator")
    assert remote.receive(result, produced, fresh) is result
    assert fresh.verify(result.engine_sha256) and fresh.verify(result.outputs_sha256)
    # corrupted bytes on the way back are refused
    bad = remote.receive(result, {result.engine_sha256: b"not an engine"}, BlobStore(tmp_path / "other"))
    assert bad.status == "crashed" and "corrupted" in bad.error


def test_a_node_that_does_not_match_the_signature_refuses_the_trial(
        node_dir: Path, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    with coordinator(tmp_path, tiny_models) as (job, runner):
        task = runner.trial_task(job, "", runner.reference(job))
    shipment, blobs = remote.ship(task)
    expect = {**job.target_data["device"], "cpu_model": "Some Other CPU"}
    with pytest.raises(remote.HardwareMismatch, match=r"cpu_model .* \(wanted Some Other CPU\)"):
        remote.run_shipped(shipment, 60, {}, [p.read_bytes() for _, p in blobs], expect)


def test_every_stored_blob_a_task_names_is_shipped(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "store")
    engine = store.put_bytes(b"engine bytes")
    inputs = store.put_bytes(b"inputs")

    @dataclasses.dataclass(frozen=True)
    class Nested:
        inputs_sha: str
        engines: tuple[tuple[str, str], ...]
        note: str = "f" * 64  # looks like a digest but names no stored blob

    assert remote.input_shas(Nested(inputs, (("-a=1", engine),)), store) == [inputs, engine]
    assert remote.input_shas(Nested(inputs, (("-a=1", engine),))) == [inputs]


def test_a_shipped_side_by_side_remeasurement_runs_on_the_node(
        node_dir: Path, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    routes = ["", "-graph_optimization_level=basic"]
    with coordinator(tmp_path, tiny_models) as (job, runner):
        ref = runner.reference(job)
        engines = tuple((r, job.build_spec(route_dict(r)), runner.run_trial(job, r, ref).engine_sha256)
                        for r in routes)
    task = RemeasureTask(backend=job.backend, spec=engines[0][1], store_root=str(runner.store.root),
                         inputs_sha=ref[0], engines=engines, order=("", routes[1], "", routes[1]), iterations=3)
    shipment, blobs = remote.ship(task)
    assert [sha for sha, _ in blobs] == [shipment.model_sha, ref[0], *(sha for _, _, sha in engines)]
    payload = [path.read_bytes() for _, path in blobs]
    result, produced = remote.run_shipped(shipment, 60, {}, payload, job.target_data["device"])
    assert result.status == "ok", result.error
    assert [route for route, _ in result.meta["slots"]] == list(task.order)
    assert all(ms > 0 for _, ms in result.meta["slots"]) and produced == {}
    # every engine's spec was pointed at the node's copy of the model, not the coordinator's path
    local, scratch = remote.stage(shipment, payload, node_dir)
    model = str(scratch / "model" / Path(job.model_path).name)
    assert {spec.model_path for _, spec, _ in local.engines} == {local.spec.model_path} == {model}
    assert local.store_root == str(scratch)
    # and it refuses to decide a winner on hardware other than its job's
    expect = {**job.target_data["device"], "cpu_model": "Some Other CPU"}
    with pytest.raises(remote.HardwareMismatch):
        remote.run_shipped(shipment, 60, {}, payload, expect)


def test_staging_refuses_a_folder_it_does_not_own_privately(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A predictable staging path another user (or a careless umask) could write to is refused, and a
    link planted there is never followed."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("TRT_ROUTES_NODE_DIR", str(shared))
    with pytest.raises(remote.StagingError, match="not a private folder"):
        remote.node_root()
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    monkeypatch.setenv("TRT_ROUTES_NODE_DIR", str(link))
    with pytest.raises(remote.StagingError, match="a link"):
        remote.node_root()
    monkeypatch.setenv("TRT_ROUTES_NODE_DIR", str(tmp_path / "fresh"))
    assert (remote.node_root().stat().st_mode & 0o777) == 0o700


def test_a_planted_blob_is_never_served(node_dir: Path, tmp_path: Path) -> None:
    """Every staged blob is written from the shipped bytes after checking their digest: a file planted
    under a blob's name on the node (or bytes corrupted in transit) never reaches the task."""
    import hashlib

    from trt_routes.backends.base import BuildSpec
    from trt_routes.execute.tasks import TrialTask

    model = tmp_path / "m.onnx"
    model.write_bytes(b"the real model")
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    spec = BuildSpec(model_path=str(model), route={}, profile={})
    task = TrialTask(backend="onnxruntime", spec=spec, store_root=str(tmp_path / "store"), inputs_sha="",
                     reference_sha="", l0_params=(), warmup=0, iterations=1, repeats=1)
    shipment, _ = remote.ship(task)
    root = remote.node_root()
    planted = BlobStore(root / "blobs")  # where the old node cache lived: a file planted under the model's name
    planted.path(sha).parent.mkdir(parents=True)
    planted.path(sha).write_bytes(b"a planted model")
    local, scratch = remote.stage(shipment, [b"the real model"], root)
    assert Path(local.spec.model_path).read_bytes() == b"the real model"
    assert scratch.parent == root and (scratch.stat().st_mode & 0o777) == 0o700
    with pytest.raises(ValueError, match="arrived corrupted"):
        remote.stage(shipment, [b"tampered in transit"], root)
    assert sorted(p.name for p in root.iterdir()) == sorted(["blobs", scratch.name])  # the failed one cleaned


def test_an_external_data_model_travels_with_its_data_to_a_node(node_dir: Path, tmp_path: Path) -> None:
    """README: an ONNX model's external-data files travel with it to a Ray node, verified by digest."""
    from _project import FAST, write_manifest
    from _real_models import external_data_mlp

    root = tmp_path / "p"
    external_data_mlp(root / "models", location="weights/mlp.onnx.data")
    path = write_manifest(root, {
        "schema_version": 1, "measurement": FAST, "switch_groups": {"g": "-graph_optimization_level=[basic|all]"},
        "strategies": {"s": {"mode": "fast", "confirm": False}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"switch_group": "g", "strategy": "s", "tolerance": "t"},
        "models": {"mlp": {"path": "models/mlp.onnx", "shapes": {"b4": {"x": [4, 16]}}}}})
    project = open_project(path)
    with project.open_cache() as cache, LocalExecutor() as executor:
        job = project.jobs[0]
        runner = TrialRunner(project, cache, SilentReporter(), executor)
        task = runner.trial_task(job, "-graph_optimization_level=basic", runner.reference(job))
    shipment, blobs = remote.ship(task)
    assert [rel for rel, _ in shipment.side_files] == ["weights/mlp.onnx.data"]
    payload = [p.read_bytes() for _, p in blobs]
    result, _ = remote.run_shipped(shipment, 60, {}, payload, job.target_data["device"])
    assert result.status == "ok", result.error
    tampered = [payload[0], b"x" * len(payload[1]), *payload[2:]]  # the weights changed on the way
    with pytest.raises(ValueError, match="arrived corrupted"):  # refused before anything runs
        remote.run_shipped(shipment, 60, {}, tampered, job.target_data["device"])
