"""`trt-routes cache import` of trtexec and Torch-TensorRT tuning caches (fixtures in the documented format):
rows become trials of a manifest job under their own signature with "unknown" fields, so they never
satisfy the job's cache lookup; explain lists them."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _paths import FIXTURES, STANDIN
from _trt_models import conv_model
from typer.testing import CliRunner

from trt_routes.audit.explain import explain
from trt_routes.backends import registry
from trt_routes.cli.app import app
from trt_routes.errors import UsageError
from trt_routes.project import Project, open_project
from trt_routes.share.tuning_import import import_tuning_cache, sniff
from trt_routes.signature import Environment, detect
from trt_routes.tune.apply import compute_plan

FIXTURES = FIXTURES / "tuning_cache"
STANDIN = STANDIN
JOB = "m/dyn/h200"
GPU = {"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": "132", "gpu_memory_gib": "141",
       "driver_version": "580.95", "cuda_driver": "13.0"}


def _purge() -> None:
    for name in list(sys.modules):
        if name in ("tensorrt", "cuda") or name.startswith(("tensorrt.", "cuda.")):
            del sys.modules[name]


@pytest.fixture
def trt(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stand-in ``tensorrt`` of tests/standin for this test only (a TensorRT job with a signature)."""
    saved = {n: m for n, m in sys.modules.items() if n in ("tensorrt", "cuda") or n.startswith(("tensorrt.", "cuda."))}
    _purge()
    monkeypatch.syspath_prepend(str(STANDIN))
    registry.get.cache_clear()  # backend instances remember whether tensorrt imported
    yield
    _purge()
    sys.modules.update(saved)
    registry.get.cache_clear()


def _manifest(root: Path) -> Path:
    conv_model(root / "m.onnx")
    (root / "tuning.yaml").write_text("""
schema_version: 1
targets: {h200: {kind: gpu, name: "*H200*"}}
switch_groups: {g: "-conv_use_long_w=[on|off] -copy_ppg=[on|off]"}
tolerances: {t: {checks: [{metric: cos, threshold: 1.0e-4}]}}
defaults: {backend: tensorrt, targets: [h200], switch_group: g, tolerance: t}
models:
  m:
    path: m.onnx
    shapes: {dyn: {x: {min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}}}
""")
    return root / "tuning.yaml"


def _project(manifest: Path) -> Project:
    return open_project(manifest, env=Environment(cpu=detect().cpu, gpus=(GPU,)))


def test_trtexec_rows_become_trials_under_an_unknown_signature(trt: None, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    project = _project(manifest)
    job = next(j for j in project.jobs if j.name == JOB)
    assert job.signature is not None and not job.blocked
    (report,) = import_tuning_cache(project, FIXTURES / "best_config.json", JOB)
    rows = [json.loads(line) for line in (FIXTURES / "best_config.json").read_text().splitlines()[1:] if line]
    assert report.added == len({r["build_route"] for r in rows}) and report.present == 0
    with project.open_cache() as cache:
        trials = cache.trials_for_job(JOB)
        assert trials and cache.group(job.group_key) == {}  # never a hit for the job
        fields = cache.signature_fields(trials[0].signature)
    assert fields is not None
    assert fields["gpu_name"] == fields["driver_version"] == fields["backend_version"] == "unknown"
    assert fields["tuner_version"] == "2.19.45" and fields["origin"] == "trtexec"
    assert set(job.signature.fields) <= set(fields)
    t = trials[0]
    assert t.source == f"trtexec:{(FIXTURES / 'best_config.json').resolve()}"
    assert t.model_digest == t.shape_key == t.host == "unknown"
    assert (t.meta.imported or {})["time_statistic"] == "mean"
    assert {x.status for x in trials} <= {"ok", "crashed", "accuracy-failed"}
    ok = [x for x in trials if x.status == "ok"]
    assert ok and all(x.median_ms is not None and x.losses for x in ok)

    with project.open_cache() as cache:  # plan: still a new job, not "stale: gpu_name unknown -> ..."
        plan = compute_plan(project, cache, project.read_lock())
    (jp,) = [p for p in plan.jobs if p.job.name == JOB]
    assert jp.action == "tune" and jp.reasons[0] == "new job: never tuned"
    ex = explain(project, JOB)
    assert ex.other_groups == 1  # shown by explain, with the precision flags every build of the job gets
    assert ex.provenance["precision"] == "TF32 on (TensorRT's default), STRICT_NANS off (TensorRT's default)"

    again = import_tuning_cache(project, FIXTURES / "best_config.json", JOB)
    assert (again[0].added, again[0].present) == (0, report.added)  # idempotent


def test_torch_tensorrt_partitions_by_base_path(trt: None, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    for f in FIXTURES.glob("tune.*.jsonl"):
        shutil.copy(f, tmp_path / f.name)
    reports = import_tuning_cache(_project(manifest), tmp_path / "tune.jsonl", JOB)
    assert len(reports) == 2 and all(r.added == 3 for r in reports)  # partitions never collide
    with _project(manifest).open_cache() as cache:
        trials = cache.trials_for_job(JOB)
        sigs = {t.signature for t in trials}
        assert len(sigs) == 2  # one per partition header
        assert {cache.signature_fields(s)["protocol"] for s in sigs} == {"torch-tensorrt (median of 10 runs)"}
    crashed = [t for t in trials if t.status == "crashed"]
    assert len(crashed) == 1 and "signal 6" in crashed[0].error


def test_import_needs_a_tensorrt_job_and_a_known_format(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    from _project import make_project

    manifest = make_project(tmp_path / "p", tiny_models)  # onnxruntime jobs
    project = open_project(manifest)
    with pytest.raises(UsageError, match="--job NAME"):
        import_tuning_cache(project, FIXTURES / "best_config.json", None)
    with pytest.raises(UsageError, match="backend 'onnxruntime'"):
        import_tuning_cache(project, FIXTURES / "best_config.json", "cnn/bs1/cpu")
    (tmp_path / "junk.bin").write_bytes(b"\x00\x01 nothing")
    with pytest.raises(UsageError, match="neither a trt-routes bundle"):
        sniff(tmp_path / "junk.bin")
    runner = CliRunner()
    result = runner.invoke(app, ["cache", "import", str(FIXTURES / "best_config.json"), "-m", str(manifest)])
    assert result.exit_code == 2 and "--job NAME" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["cache", "import", str(tmp_path / "nothing.jsonl"), "-m", str(manifest)])
    assert result.exit_code == 2 and "no such file" in result.output


def test_malformed_tuning_cache_names_file_and_line(trt: None, tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    result = CliRunner().invoke(app, ["cache", "import", str(FIXTURES / "malformed.jsonl"), "--job", JOB,
                                      "-m", str(manifest)])
    assert result.exit_code == 2 and "malformed.jsonl:" in result.output
    with open_project(manifest).open_cache() as cache:
        assert cache.count() == 0


@pytest.mark.parametrize("content", [b"{\x80", b'{"format": "x"}\n\xff\xfe'])
def test_bytes_that_are_not_utf8_are_a_clean_error_naming_the_line(trt: None, tmp_path: Path,
                                                                     content: bytes) -> None:
    manifest = _manifest(tmp_path)
    (tmp_path / "x.bin").write_bytes(content)
    result = CliRunner().invoke(app, ["cache", "import", str(tmp_path / "x.bin"), "--job", JOB,
                                      "-m", str(manifest)])
    line = content.count(b"\n") + 1
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"x.bin:{line}: not UTF-8" in result.output and "cache export" in result.output, result.output
    with open_project(manifest).open_cache() as cache:
        assert cache.count() == 0


def test_cli_import_without_tensorrt_records_unknown_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            tiny_models: dict[str, Path]) -> None:
    """Where TensorRT is missing the job is blocked and has no signature: TensorRT's field names are used."""
    _purge()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "standin" not in p])
    registry.get.cache_clear()
    manifest = _manifest(tmp_path)
    result = CliRunner().invoke(app, ["cache", "import", str(FIXTURES / "best_config.json"), "--job", JOB,
                                      "-m", str(manifest), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["reports"][0]["added"] >= 1
    with open_project(manifest).open_cache() as cache:
        sig = cache.trials_for_job(JOB)[0].signature
        fields = cache.signature_fields(sig)
    assert fields is not None and fields["gpu_name"] == "unknown" and fields["catalog_digest"] == "unknown"
