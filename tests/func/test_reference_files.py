"""User-given reference data (``reference: {inputs: x.npz, outputs: y.npz}``) is checked at validate, before any
command writes: the files exist, are .npz archives of plain arrays (pickled objects refused, never loaded), hold
the graph's inputs and outputs by name, and the inputs' dtypes and ranks. Good files tune (apply reads them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from _project import cli

REPO = Path(__file__).resolve().parents[2]
MANIFEST = """schema_version: 1
defaults: {backend: onnxruntime, switch_group: g, strategy: s, tolerance: t}
switch_groups: {g: "-intra_op_num_threads=[1|2]"}
strategies: {s: {mode: fast}}
tolerances: {t: {checks: [{metric: cos, threshold: 1.0e-4}]}}
models:
  m:
    path: resnet_like.onnx
    shapes: {bs1: {input: [1, 3, 32, 32]}}
    reference: {inputs: in.npz, outputs: out.npz}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(REPO / "recipes" / "quickstart" / "resnet_like.onnx", tmp_path)
    (tmp_path / "tuning.yaml").write_text(MANIFEST)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "resnet_like.onnx"), providers=["CPUExecutionProvider"])
    np.savez(tmp_path / "in.npz", input=x)
    np.savez(tmp_path / "out.npz", logits=session.run(None, {"input": x})[0])
    return tmp_path / "tuning.yaml"


def test_good_reference_files_validate_and_tune(project: Path) -> None:
    code, out = cli("validate", "-m", str(project))
    assert code == 0, out
    code, out = cli("apply", "-m", str(project))
    assert code == 0 and "lockfile written" in out, out


@pytest.mark.parametrize(("bad", "expect", "column"), [
    ("missing", "reference file not found", 25),
    ("garbage", "in.npz is not a .npz archive of arrays", 25),
    ("pickled", "out.npz holds Python objects (logits): trt-routes never unpickles", 42),
    ("names", "in.npz must hold the model's inputs by name: missing input; not inputs of resnet_like.onnx: x", 25),
    ("dtype", "in.npz: input 'input' is float64 of shape [1, 3, 32], the graph's is float32 of rank 4", 25),
])
def test_bad_reference_files_are_manifest_errors_and_nothing_is_written(
        project: Path, bad: str, expect: str, column: int) -> None:
    root = project.parent
    if bad == "missing":
        (root / "in.npz").unlink()
    elif bad == "garbage":
        (root / "in.npz").write_bytes(b"{\x80 not a zip")
    elif bad == "pickled":
        np.savez(root / "out.npz", logits=np.array([{"a": 1}], dtype=object))
    elif bad == "names":
        np.savez(root / "in.npz", x=np.zeros((1, 3, 32, 32), np.float32))
    else:
        np.savez(root / "in.npz", input=np.zeros((1, 3, 32), np.float64))
    for command in ("validate", "apply"):
        code, out = cli(command, "-m", str(project))
        assert code == 2 and expect in out and f"tuning.yaml:10:{column}" in out, out
        assert "Traceback" not in out
    assert not (root / "tuning.lock").exists() and not (root / "caches").exists()
