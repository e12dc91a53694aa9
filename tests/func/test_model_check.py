"""validate and plan open the models: every mistake of a manifest against its models is exit 2 at
``tuning.yaml:LINE:COL``, before anything is built or written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _real_models import external_data_mlp, token_model

MLP = {"path": "models/mlp.onnx", "shapes": {"b2": {"x": [2, 16]}}}  # x: float32 [N, 16]
TOK = {"path": "models/tok.onnx", "shapes": {"s8": {"input_ids": [2, 8], "attention_mask": [2, 8]}},
       "inputs": {"input_ids": {"dtype": "int64", "low": 0, "high": 50},
                  "attention_mask": {"dtype": "int64", "low": 0, "high": 2}}}


def project(root: Path, models: dict[str, Any]) -> Path:
    external_data_mlp(root / "models")
    token_model(root / "models")
    path = root / "tuning.yaml"
    path.write_text(yaml.safe_dump({
        "schema_version": 1, "switch_groups": {"g": "-graph_optimization_level=[basic|all]"},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"backend": "onnxruntime", "switch_group": "g", "tolerance": "t"},
        "models": models}, sort_keys=False, default_flow_style=None))
    return path


def files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def with_(base: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    import copy

    out = copy.deepcopy(base)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


#: (case, models, text the message holds, text on the line it points at)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown input", {"mlp": with_(MLP, ("shapes", "b2"), {"X": [2, 16]})},
     "'X', which is not an input of mlp.onnx (its inputs: x float32[N, 16])", "X:"),
    ("missing input", {"tok": with_(TOK, ("shapes", "s8", "attention_mask"), None)},
     "gives no shape for input(s) 'attention_mask' int64[batch, sequence]", "s8:"),
    ("rank", {"mlp": with_(MLP, ("shapes", "b2", "x"), [2, 16, 1])}, "has rank 2 in mlp.onnx", "x:"),
    ("static dim", {"mlp": with_(MLP, ("shapes", "b2", "x"), [2, 15])},
     "static dimension 16 at axis 1 in mlp.onnx ([N, 16]), profile 'b2' gives 15", "x:"),
    ("dynamic max beyond a static dim", {"mlp": with_(MLP, ("shapes", "b2", "x"),
                                                      {"min": [1, 16], "opt": [2, 16], "max": [4, 32]})},
     "gives max 32", "max:"),
    ("dim <= 0", {"mlp": with_(MLP, ("shapes", "b2", "x"), [0, 16])},  # the schema's bound
     "models.mlp.shapes.b2.x[0]: input should be greater than or equal to 1 (got 0)", "x:"),
    ("dtype", {"tok": with_(TOK, ("inputs", "input_ids", "dtype"), "float32")},
     "input 'input_ids' is int64 in tok.onnx, the manifest says dtype: float32", "dtype: float32"),
    ("inputs names an unknown input", {"mlp": {**MLP, "inputs": {"y": {"dtype": "float32"}}}},
     "'inputs:' names 'y', which is not an input of mlp.onnx", "y:"),
    ("inverted range", {"tok": with_(TOK, ("inputs", "input_ids"), {"dtype": "int64", "low": 10, "high": 5})},
     "models.tok.inputs.input_ids: low (10) must not be above high (5)", "low: 10"),
    ("empty integer range", {"tok": with_(TOK, ("inputs", "attention_mask"), {"dtype": "int64", "low": 1,
                                                                            "high": 1})},
     "the integer range [1, 1) is empty", "high: 1"),
    ("integer input without a range", {"tok": with_(TOK, ("inputs", "input_ids"), None)},
     "input 'input_ids' is int64: its values must be given", "inputs:"),
    ("integer inputs and no inputs block at all", {"tok": with_(TOK, ("inputs",), None)},  # was an IndexError
     "input 'input_ids' is int64: its values must be given", "tok:"),
    ("a shared symbolic dim with two sizes", {"tok": with_(TOK, ("shapes", "s8", "attention_mask"), [2, 9])},
     "share the dimension 'sequence' but profile 's8' gives it 8 and 9", "attention_mask:"),
]


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trt_routes.cli.app", *args], cwd=root, capture_output=True,
                          text=True, timeout=120)


def assert_positioned(out: str, manifest: Path, message: str, line_text: str) -> None:
    assert message in out, out
    found = re.search(r"tuning\.yaml:(\d+):(\d+): .*" + re.escape(message[:30]), out)
    assert found, out
    line = manifest.read_text().splitlines()[int(found.group(1)) - 1]
    assert line_text in line, (line, out)
    assert "Traceback" not in out


@pytest.mark.parametrize(("case", "models", "message", "line_text"), CASES, ids=[c[0] for c in CASES])
def test_each_mistake_is_exit_2_at_validate_with_its_position(tmp_path: Path, case: str, models: dict[str, Any],
                                                             message: str, line_text: str) -> None:
    manifest = project(tmp_path, models)
    before = files(tmp_path)
    done = run(tmp_path, "validate")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_positioned(done.stdout + done.stderr, manifest, message, line_text)
    assert files(tmp_path) == before  # nothing written: no cache, no lock, no engines


def test_plan_refuses_the_same_mistakes(tmp_path: Path) -> None:
    manifest = project(tmp_path, {"mlp": with_(MLP, ("shapes", "b2", "x"), [2, 15])})
    before = files(tmp_path)
    done = run(tmp_path, "plan")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_positioned(done.stdout + done.stderr, manifest, "static dimension 16 at axis 1", "x:")
    # no lock, no engines (the CLI opens the cache before it resolves the jobs: an empty cache may appear)
    assert files(tmp_path) - before <= {Path("caches"), Path("caches/trials.sqlite")}


def test_several_mistakes_are_reported_together(tmp_path: Path) -> None:
    project(tmp_path, {"mlp": with_(MLP, ("shapes", "b2", "x"), [2, 15]),
                       "tok": with_(TOK, ("inputs", "input_ids"), None)})
    out = run(tmp_path, "validate")
    assert out.returncode == 2
    assert "static dimension 16" in out.stdout + out.stderr and "is int64" in out.stdout + out.stderr


def test_a_correct_manifest_validates(tmp_path: Path) -> None:
    project(tmp_path, {"mlp": MLP, "tok": TOK})
    done = run(tmp_path, "validate")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "not onnx", "missing external data"])
def test_a_bad_model_file_is_named_at_validate(tmp_path: Path, kind: str) -> None:
    manifest = project(tmp_path, {"mlp": MLP})
    model = tmp_path / "models" / "mlp.onnx"
    if kind == "missing":
        model.unlink()
        message = f"model file not found: {model}"
    elif kind == "directory":
        model.unlink()
        model.mkdir()
        message = f"the model path is a directory, not a file: {model}"
    elif kind == "empty":
        model.write_bytes(b"")
        message = f"the model file is empty: {model}"
    elif kind == "not onnx":
        model.write_text("this is not a model\n")
        message = f"not an ONNX model: {model}"
    else:
        (tmp_path / "models" / "mlp.onnx.data").unlink()
        message = f"external data file not found: {tmp_path / 'models' / 'mlp.onnx.data'}"
    before = files(tmp_path)
    done = run(tmp_path, "validate")
    assert done.returncode == 2, done.stdout + done.stderr
    assert_positioned(done.stdout + done.stderr, manifest, message, "path: models/mlp.onnx")
    assert files(tmp_path) == before


@pytest.mark.parametrize(("edit", "message", "line_text"), [
    (lambda d: d["defaults"].update(targets=[]), "defaults.targets: list should have at least 1 item", "targets: []"),
    (lambda d: d.update(targets={}), "targets: dictionary should have at least 1 item", "targets: {}"),
    (lambda d: d["models"]["mlp"].update(targets=[]), "models.mlp.targets: list should have at least 1 item",
     "targets: []"),
], ids=["defaults", "top level", "one model"])
def test_a_manifest_that_would_make_no_job_is_refused(tmp_path: Path, edit: Any, message: str,
                                                      line_text: str) -> None:
    """`targets: []` used to make a manifest with zero jobs: every command exited 0 and apply wrote files."""
    manifest = project(tmp_path, {"mlp": dict(MLP)})
    data = yaml.safe_load(manifest.read_text())
    edit(data)
    manifest.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
    before = files(tmp_path)
    for command in ("validate", "plan", "apply"):
        done = run(tmp_path, command)
        assert done.returncode == 2, (command, done.stdout + done.stderr)
        assert_positioned(done.stdout + done.stderr, manifest, message, line_text)
    assert files(tmp_path) == before


def test_a_tolerance_naming_an_output_the_model_lacks_is_refused_at_validate(tmp_path: Path) -> None:
    """It used to pass validate and plan; apply then built, failed every route and wrote a lockfile."""
    manifest = project(tmp_path, {"mlp": dict(MLP)})
    data = yaml.safe_load(manifest.read_text())
    data["tolerances"]["t"]["outputs"] = {"Y": [{"metric": "cos", "threshold": 1e-4}]}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
    before = files(tmp_path)
    for command in ("validate", "plan", "apply"):
        done = run(tmp_path, command)
        assert done.returncode == 2, (command, done.stdout + done.stderr)
        assert_positioned(done.stdout + done.stderr, manifest,
                          "tolerance 't' names output 'Y', which model 'mlp' (mlp.onnx) does not have (its "
                          "outputs: y)", "Y:")
        assert "did you mean 'y'?" in done.stdout + done.stderr
    assert files(tmp_path) == before
    data["tolerances"]["t"]["outputs"] = {"y": [{"metric": "cos", "threshold": 1e-4}]}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
    assert run(tmp_path, "validate").returncode == 0
