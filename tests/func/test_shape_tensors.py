"""Shape-tensor inputs (an input whose values are a shape, e.g. a Reshape's target; issue 33): declared
``shape_tensor: true`` under ``inputs:``, each shape profile gives its values at min/opt/max (as trtexec's
``--shapes`` does), and every route is fed those values, here with ONNX Runtime on the CPU. TensorRT's side
(set_shape_input, host memory) is in tests/backends/test_backend_tensorrt.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _project import FAST, cli, edit_manifest, write_manifest
from _trt_models import RESHAPE_PROFILE, exported_reshape_model, reshape_model

from trt_routes.lockfile import Lockfile


def _manifest(root: Path, make: Any = reshape_model, **inputs: Any) -> Path:
    make(root / "r.onnx")
    return write_manifest(root, {
        "schema_version": 1, "measurement": FAST,
        "switch_groups": {"g": "-graph_optimization_level=[basic|all]"},
        "strategies": {"s": {"mode": "fast"}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-5}]}},
        "defaults": {"backend": "onnxruntime", "switch_group": "g", "strategy": "s", "tolerance": "t"},
        "models": {"r": {"path": "r.onnx", "shapes": {"p": RESHAPE_PROFILE},
                         "inputs": inputs or {"s": {"dtype": "int64", "shape_tensor": True}}}},
    })


@pytest.mark.parametrize("make", [reshape_model, exported_reshape_model], ids=["onnx-helper", "torch.onnx.export"])
def test_a_shape_tensor_is_fed_its_profile_values_at_every_point(tmp_path: Path, make: Any) -> None:
    manifest = _manifest(tmp_path, make)
    code, out = cli("apply", "-m", str(manifest))
    assert code == 0, out
    entry = Lockfile.read(tmp_path / "tuning.lock").jobs["r/p/cpu"]
    assert entry["route"] in ("", "-graph_optimization_level=basic", "-graph_optimization_level=all")
    from trt_routes.evidence.inputs import make_inputs
    from trt_routes.project import open_project

    project = open_project(manifest)
    with project.open_cache() as cache:
        trials = cache.trials_for_job("r/p/cpu")
    assert trials and all(t.status == "ok" for t in trials)  # run at opt, checked at min and max too
    job = project.jobs[0]
    for point, rows in (("min", 1), ("opt", 2), ("max", 4)):  # what each point feeds (the worker's specs)
        feeds = make_inputs({n: {**spec, "shape": RESHAPE_PROFILE[n][point]} for n, spec in job.inputs.items()}, 0)
        assert feeds["s"].tolist() == [rows, 3, 4] and feeds["x"].shape == (rows, 12)


@pytest.mark.parametrize(("inputs", "needle"), [
    ({"s": {"dtype": "float32", "shape_tensor": True}}, "a shape tensor's values are integers"),
    ({"x": {"dtype": "float32", "shape_tensor": True}, "s": {"dtype": "int64", "shape_tensor": True}},
     "write dtype: int64"),
])
def test_a_shape_tensor_of_floats_is_refused_with_its_line(tmp_path: Path, inputs: dict[str, Any],
                                                            needle: str) -> None:
    code, out = cli("validate", "-m", str(_manifest(tmp_path, **inputs)))
    assert code != 0 and needle in out and "tuning.yaml:" in out, out


def test_a_profile_giving_a_shape_tensor_the_wrong_number_of_values_is_refused_with_its_line(
        tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    edit_manifest(manifest, lambda d: d["models"]["r"]["shapes"]["p"]["s"].update(min=[1, 12], opt=[2, 12],
                                                                                max=[4, 12]))
    code, out = cli("validate", "-m", str(manifest))
    assert code != 0 and "shape tensor 's' is [3]" in out and "gives 2 value(s)" in out, out
