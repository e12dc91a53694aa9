"""`lock show JOB [--trtexec]`: the lock entry as in tuning.lock, and for TensorRT jobs the trtexec command
that rebuilds the locked engine; plus `apply --frozen` on a backend whose engines are not bit-reproducible
(the stand-in TensorRT of tests/standin, in real worker processes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _paths import STANDIN
from _project import cli
from _trt_models import conv_model

from trt_routes.lockfile import Lockfile

STANDIN = STANDIN


def test_lock_show_prints_the_entry_as_locked(tuned: Path) -> None:
    entry = Lockfile.read(tuned.parent / "tuning.lock").jobs["cnn/bs1/cpu"]
    code, out = cli("lock", "show", "cnn/bs1/cpu", "-m", str(tuned))
    assert code == 0
    locked, serving = out.split("\n# serving: ", 1)  # the entry, then what a serving process must set
    assert yaml.safe_load(locked) == {"cnn/bs1/cpu": entry}
    assert "InferenceSession(" in serving
    code, out = cli("lock", "show", "cnn/bs1/cpu", "--json", "-m", str(tuned))
    doc = json.loads(out)
    assert code == 0 and doc.pop("serving")["backend"] == "onnxruntime"
    assert doc == {"format": "trt-routes/lock-show@1", "job": "cnn/bs1/cpu", "entry": entry}


def test_trtexec_does_not_apply_to_onnxruntime_jobs(tuned: Path) -> None:
    code, out = cli("lock", "show", "cnn/bs1/cpu", "--trtexec", "-m", str(tuned))
    assert code == 2
    assert "trtexec does not apply to cnn/bs1/cpu: it is built by the onnxruntime backend" in out
    assert "apply --frozen --only 'cnn/bs1/cpu'" in out and "Traceback" not in out


def test_lock_show_unknown_job_and_missing_lock(tuned: Path, tmp_path: Path) -> None:
    code, out = cli("lock", "show", "cnn/bs2/cpu", "-m", str(tuned))
    assert code == 2 and "no job 'cnn/bs2/cpu' in tuning.lock" in out and "did you mean" in out
    empty = tmp_path / "p"
    empty.mkdir()
    shutil.copy(tuned, empty / "tuning.yaml")
    code, out = cli("lock", "show", "cnn/bs1/cpu", "-m", str(empty / "tuning.yaml"))
    assert code == 2 and "no lockfile at" in out


TRT_MANIFEST = """
schema_version: 1
measurement: {{warmup: 1, iterations: 3, repeats: 2, timeout_s: 120}}
targets: {{h200: {{kind: gpu, name: "*H200*"}}}}
switch_groups: {{g: "-conv_use_long_w=[on|off] -peep:max=4"}}
strategies: {{s: {{mode: fast}}}}
tolerances: {{t: {{checks: [{{metric: cos, threshold: 1.0e-5}}, {{metric: lInf, threshold: 1.0e-3}}]}}}}
defaults: {{backend: tensorrt, targets: [h200], switch_group: g, strategy: s, tolerance: t,
           settings: {{builder_optimization_level: 2, workspace_mib: 512, timing_cache_dir: "{tc}"}}}}
models:
  m:
    path: m.onnx
    shapes: {{dyn: {{x: {{min: [1, 3, 8, 8], opt: [2, 3, 8, 8], max: [4, 3, 8, 8]}}}}}}
"""


def run_with_standin(args: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """trt-routes in a subprocess that imports the stand-in tensorrt/cuda (and so do its workers)."""
    path = os.pathsep.join(p for p in (str(STANDIN), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "TRT_STANDIN_NONDETERMINISTIC": "1"}  # like real TensorRT: every build gives other bytes
    return subprocess.run([sys.executable, "-m", "trt_routes.cli.app", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300, check=False)


def test_tensorrt_lock_show_trtexec_and_frozen_rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tuning = tmp_path / "tuning"
    tuning.mkdir()
    conv_model(tuning / "m.onnx")
    (tuning / "tuning.yaml").write_text(TRT_MANIFEST.format(tc=tmp_path / "tc"))
    done = run_with_standin(["apply", "-m", "tuning.yaml"], tuning, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    entry = Lockfile.read(tuning / "tuning.lock").jobs["m/dyn/h200"]

    monkeypatch.chdir(tuning)  # lock show needs no TensorRT: it reads the lock and the manifest's paths
    code, out = cli("lock", "show", "m/dyn/h200", "--trtexec")
    assert code == 0, out
    command = out.strip()
    assert command.startswith("trtexec --onnx=m.onnx --minShapes=x:1x3x8x8 --optShapes=x:2x3x8x8 "
                              "--maxShapes=x:4x3x8x8 --builderOptimizationLevel=2 --memPoolSize=workspace:512M "
                              "--saveEngine=engines/m/dyn/h200.engine")
    if entry["route"]:  # the winner depends on measured times; the default route needs no --setBuildRoute
        assert command.endswith(f'--setBuildRoute="{entry["route"]}"')
    else:
        assert command.endswith("--saveEngine=engines/m/dyn/h200.engine")
    assert "timing_cache" not in command

    # a CPU-only CI runner (no TensorRT here) checks the lock against the manifest as far as it can
    code, out = cli("lock", "check")
    assert code == 0, out
    assert "note: m/dyn/h200: the tensorrt backend is unavailable here" in out and "matches the manifest" in out
    (tuning / "tuning.yaml").write_text(TRT_MANIFEST.format(tc=tmp_path / "tc").replace("[4, 3, 8, 8]", "[8, 3, 8, 8]"))
    code, out = cli("lock", "check")
    assert code == 1 and "m/dyn/h200: changed: shape profile changed: x.max [4, 3, 8, 8] -> [8, 3, 8, 8]" in out
    (tuning / "tuning.yaml").write_text(TRT_MANIFEST.format(tc=tmp_path / "tc"))

    fresh = tmp_path / "fresh"  # a deploy machine: manifest, model and lock only
    fresh.mkdir()
    for name in ("m.onnx", "tuning.yaml", "tuning.lock"):
        shutil.copy(tuning / name, fresh / name)
    done = run_with_standin(["apply", "--frozen", "--json", "-m", "tuning.yaml"], fresh, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    (job,) = result["jobs"]
    assert job["route"] == entry["route"] and job["built"] == 1 and result["built"] == 1
    # TensorRT engines are not bit-reproducible: the check is route, accuracy and timing, the digest is noted
    assert job["digest"] == "differs (tensorrt builds are not bit-reproducible)"
    assert job["engine_sha256"] != entry["engine"]["sha256"] and len(job["checks"]) == 3
    assert job["checks"][:2] == [f"route {entry['route'] or 'default'} built as locked",
                                 "accuracy within tolerance 't'"]
    assert (fresh / "engines" / "m" / "dyn" / "h200.engine").is_file()
    record = json.loads((fresh / "engines" / "frozen.json").read_text())
    assert record["jobs"]["m/dyn/h200"]["engine"]["sha256"] == job["engine_sha256"]
    assert record["jobs"]["m/dyn/h200"]["locked_sha256"] == entry["engine"]["sha256"]
    assert (fresh / "tuning.lock").read_text() == (tuning / "tuning.lock").read_text()
    done = run_with_standin(["status", "--json", "-m", "tuning.yaml"], fresh, tmp_path)
    (row,) = json.loads(done.stdout)["jobs"]
    assert done.returncode == 0 and row["state"] == "ok", row  # a verified rebuild is not a digest mismatch
    assert row["detail"].startswith("engine rebuilt from the lock by `apply --frozen` (sha256 "
                                    f"{job['engine_sha256'][:12]}, differs (tensorrt builds are not")
    again = run_with_standin(["apply", "--frozen", "--json", "-m", "tuning.yaml"], fresh, tmp_path)
    assert again.returncode == 0 and json.loads(again.stdout)["built"] == 0  # its own verified rebuild serves


def test_lock_show_gives_the_onnxruntime_session_options_the_engine_was_measured_with(
        tuned: Path, tmp_path: Path) -> None:
    """ORT engines of routes that differ only in runtime knobs are byte-identical: the serving settings are
    what `load` sets, and the snippet runs the locked engine."""
    import json
    import os

    import onnxruntime as ort

    from trt_routes.backends import registry

    backend = registry.get("onnxruntime")
    route = {"-intra_op_num_threads": "2", "-disable_prepacking": "1", "-execution_mode": "parallel"}
    serving = backend.serving(route, {}, "x.onnx")
    assert serving is not None
    measured = backend._runtime_options(backend._route(route))  # what the worker's `load` applies
    for key, value in serving["session_options"].items():
        got = getattr(measured, key)
        assert (got.name if hasattr(got, "name") else got) == value, key
    for key, value in serving["session_config"].items():
        assert measured.get_session_config_entry(key) == value, key
    assert serving["session_options"]["intra_op_num_threads"] == 2
    assert serving["session_config"]["session.disable_prepacking"] == "1"

    project = tmp_path / "p"
    shutil.copytree(tuned.parent, project)
    code, out = cli("lock", "show", "cnn/bs1/cpu", "--json", "-m", str(project / "tuning.yaml"))
    assert code == 0, out
    doc = json.loads(out)["serving"]
    assert doc["backend"] == "onnxruntime" and doc["settings"]["providers"] == ["CPUExecutionProvider"]
    code, text = cli("lock", "show", "cnn/bs1/cpu", "-m", str(project / "tuning.yaml"))
    assert code == 0 and doc["settings"]["python"] in text
    scope: dict[str, object] = {}
    exec(doc["settings"]["python"], scope)  # ready to paste: it opens the locked engine (path from the cwd)
    session = scope["session"]
    assert isinstance(session, ort.InferenceSession) and os.path.exists(doc["engine"])
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_torch_inductor_serving_gives_the_compile_settings_ready_to_paste() -> None:
    pytest.importorskip("torch")
    from trt_routes.backends import registry

    backend = registry.get("torch-inductor")
    if backend.unavailable_reason() is not None:
        pytest.skip(backend.unavailable_reason() or "")
    route = {"-channels_last": "1"}
    serving = backend.serving(route, {"mode": "jit", "device": "cpu", "fullgraph": True}, "e.json")
    assert serving["model_options"] == {"channels_last": True} and serving["compile"]["fullgraph"] is True
    scope: dict[str, object] = {"model": _Model()}
    exec(serving["python"].replace("torch.compile(", "dict(model_=") , scope)  # valid Python, config as locked
    assert scope["inductor_config"] == serving["inductor_config"] and serving["inductor_config"]


class _Model:
    def to(self, **_: object) -> _Model:
        return self
