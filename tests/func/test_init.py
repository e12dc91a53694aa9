"""`trt-routes init`: a tuning.yaml written from ONNX models that validates and applies as written, its
refusals (existing file, symbolic dimension without a size, bad --dim), and `init --example`."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from _project import cli
from onnx import TensorProto, helper, numpy_helper

from trt_routes import examples

VOCAB = 50


def _int_model(path: Path) -> Path:
    """Symbolic batch, int64 ``input_ids`` [batch, 8] into an embedding (Gather of a 50-row table) and int64
    ``offset`` [batch, 1] added after a Cast (its range is not in the graph); output ``y`` [batch, 16]."""
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((VOCAB, 16)).astype(np.float32), "emb")
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["e"], axis=0),
        helper.make_node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=0),
        helper.make_node("Cast", ["offset"], ["o"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["m", "o"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "ints", [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", 8]),
        helper.make_tensor_value_info("offset", TensorProto.INT64, ["batch", 1]),
    ], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def _apply_ok(manifest: Path) -> dict[str, object]:
    code, out = cli("validate", "-m", str(manifest))
    assert code == 0, out
    code, out = cli("apply", "-m", str(manifest), "--quiet")
    assert code == 0, out
    lock = yaml.safe_load((manifest.parent / "tuning.lock").read_text())
    assert lock, "apply wrote an empty tuning.lock"
    return lock  # type: ignore[no-any-return]


@pytest.mark.slow
def test_init_int64_symbolic_batch_validates_and_applies(tmp_path: Path) -> None:
    model = _int_model(tmp_path / "ints.onnx")
    manifest = tmp_path / "tuning.yaml"
    code, out = cli("init", str(model), "--dim", "batch=1,2,4", "--strategy", "quick", "-o", str(manifest))
    assert code == 0, out
    assert "check: ints.offset" in out
    text = manifest.read_text()
    data = yaml.safe_load(text)
    m = data["models"]["ints"]
    assert m["path"] == "ints.onnx"
    assert m["shapes"] == {"dynamic": {"input_ids": {"min": [1, 8], "opt": [2, 8], "max": [4, 8]},
                                       "offset": {"min": [1, 1], "opt": [2, 1], "max": [4, 1]}}}
    assert m["inputs"]["input_ids"] == {"dtype": "int64", "low": 0, "high": VOCAB}  # the table's rows
    assert m["inputs"]["offset"] == {"dtype": "int64", "low": 0, "high": 2}
    offset_line = next(line for line in text.splitlines() if line.strip().startswith("offset:"))
    assert "# check: range not inferred" in offset_line
    assert "from the graph: indexes 'emb' (50 rows)" in text
    assert data["defaults"] == {"backend": "onnxruntime", "targets": ["cpu"], "switch_group": "ort-cpu",
                                "strategy": "quick", "tolerance": "fp32"}
    quick = yaml.safe_load(examples.quickstart_manifest().read_text())  # same protocol, group and fp32 gate
    assert data["measurement"] == quick["measurement"]
    assert data["switch_groups"]["ort-cpu"] == quick["switch_groups"]["ort-cpu"]
    assert data["tolerances"]["fp32"] == quick["tolerances"]["fp32"]
    lock = _apply_ok(manifest)
    assert "ints/dynamic/cpu" in str(lock)


@pytest.mark.slow
def test_init_on_a_torch_export_validates_and_applies(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(20, 8)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, ids: object) -> object:
            return torch.relu(self.fc(self.emb(ids).mean(dim=1)))

    torch.manual_seed(0)
    path = tmp_path / "models" / "torch_net.onnx"
    path.parent.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), (torch.zeros(2, 6, dtype=torch.int64),), str(path), input_names=["ids"],
                          output_names=["y"], dynamic_axes={"ids": {0: "batch"}, "y": {0: "batch"}},
                          opset_version=17, dynamo=False)
    manifest = tmp_path / "tuning.yaml"
    code, out = cli("init", str(path), "--dim", "batch=2", "--strategy", "quick", "-o", str(manifest))
    assert code == 0, out
    data = yaml.safe_load(manifest.read_text())
    m = data["models"]["torch-net"]
    assert m["path"] == "models/torch_net.onnx"
    assert m["shapes"] == {"static": {"ids": [2, 6]}}  # --dim NAME=SIZE: a static profile
    assert m["inputs"]["ids"] == {"dtype": "int64", "low": 0, "high": 20}
    assert "torch-net/static/cpu" in str(_apply_ok(manifest))


def test_init_refuses_to_overwrite_without_force(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = tmp_path / "tuning.yaml"
    manifest.write_text("mine\n")
    code, out = cli("init", str(tiny_models["resnet_like"]), "--dim", "N=1", "-o", str(manifest))
    assert code == 2 and "already exists" in out and "--force" in out
    assert manifest.read_text() == "mine\n"
    code, out = cli("init", str(tiny_models["resnet_like"]), "--dim", "N=1", "-o", str(manifest), "--force")
    assert code == 0, out
    assert yaml.safe_load(manifest.read_text())["models"]["resnet-like"]["shapes"] == {
        "static": {"input": [1, 3, 32, 32]}}


@pytest.mark.parametrize(("args", "message"), [
    ([], "dimension 'N' is symbolic"),  # no size and stdin is no terminal: not asked
    (["--dim", "N=8,4,16"], "need 1 <= MIN <= OPT <= MAX"),
    (["--dim", "N=a,b"], "expected NAME=MIN,OPT,MAX"),
    (["--dim", "N=1", "--dim", "batch=2"], "no model has such a symbolic dimension"),
    (["--dim", "N=1", "--backend", "nope"], "not 'nope'"),
])
def test_init_usage_errors_write_nothing(tmp_path: Path, tiny_models: dict[str, Path], args: list[str],
                                         message: str) -> None:
    manifest = tmp_path / "tuning.yaml"
    code, out = cli("init", str(tiny_models["resnet_like"]), "-o", str(manifest), *args)
    assert code == 2, out
    assert message in out and "Traceback" not in out
    assert not manifest.exists()


def test_init_bad_model_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    for path, message in ((tmp_path / "missing.onnx", "no such model file"), (junk, "not an ONNX model")):
        code, out = cli("init", str(path), "-o", str(tmp_path / "tuning.yaml"))
        assert code == 2 and message in out and "Traceback" not in out, out
    assert not (tmp_path / "tuning.yaml").exists()


def test_init_asks_for_a_dimension_on_a_terminal(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """Run under a pseudo-terminal: the missing size is asked for, a bad answer asked again."""
    script = (
        "import pty, os, sys\n"
        "pid, fd = pty.fork()\n"
        "if pid == 0:\n"
        f"    os.execv(sys.executable, [sys.executable, '-m', 'trt_routes.cli.app', 'init', "
        f"{str(tiny_models['resnet_like'])!r}, '-o', {str(tmp_path / 'tuning.yaml')!r}])\n"
        "out = b''\n"
        "answers = [b'9,2,1\\n', b'1,2,4\\n']\n"
        "while True:\n"
        "    try:\n"
        "        chunk = os.read(fd, 1024)\n"
        "    except OSError:\n"
        "        break\n"
        "    if not chunk:\n"
        "        break\n"
        "    out += chunk\n"
        "    if chunk.rstrip().endswith(b':') and answers:\n"
        "        os.write(fd, answers.pop(0))\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.stdout.write(out.decode(errors='replace'))\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sizes of symbolic dimension 'N'" in proc.stdout and "need 1 <= MIN" in proc.stdout
    shapes = yaml.safe_load((tmp_path / "tuning.yaml").read_text())["models"]["resnet-like"]["shapes"]
    assert shapes == {"dynamic": {"input": {"min": [1, 3, 32, 32], "opt": [2, 3, 32, 32], "max": [4, 3, 32, 32]}}}


def test_init_example_writes_the_quickstart(tmp_path: Path) -> None:
    code, out = cli("init", "--example", str(tmp_path / "demo"))
    assert code == 0, out
    demo = tmp_path / "demo"
    assert (demo / "tuning.yaml").read_text() == examples.quickstart_manifest().read_text()
    code, out = cli("validate", "-m", str(demo / "tuning.yaml"))
    assert code == 0 and "2 model(s), 4 job(s)" in out, out
    for name in ("resnet_like", "transformer_block"):
        onnx.checker.check_model(str(demo / "recipes" / "quickstart" / f"{name}.onnx"), full_check=True)
    code, out = cli("init", "--example", str(demo))
    assert code == 2 and "already exists" in out


def _reshaped_ids_model(path: Path) -> Path:
    """Token ids that pass a Reshape and an Unsqueeze before the embedding's Gather, as torch.onnx.export
    (dynamo=True) writes a GPT-2's; a 50-row table."""
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((VOCAB, 4)).astype(np.float32), "wte")
    shape = numpy_helper.from_array(np.array([-1, 8], dtype=np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["input_ids", "shape"], ["ids2"]),
             helper.make_node("Gather", ["wte", "ids2"], ["y"], axis=0)]
    graph = helper.make_graph(nodes, "gpt", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4])], [table, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_ids_beyond_the_embedding_are_refused_at_validate_through_shape_only_ops(tmp_path: Path) -> None:
    """init follows the ids through the Reshape to the Gather (high: 50, not 2); validate refuses a high
    beyond the table at its position, naming the table and the bound to write."""
    model = _reshaped_ids_model(tmp_path / "gpt.onnx")
    manifest = tmp_path / "tuning.yaml"
    code, out = cli("init", str(model), "-o", str(manifest))
    assert code == 0, out
    data = yaml.safe_load(manifest.read_text())
    assert data["models"]["gpt"]["inputs"]["input_ids"]["high"] == VOCAB
    data["models"]["gpt"]["inputs"]["input_ids"]["high"] = 40000
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    code, out = cli("validate", "-m", str(manifest))
    assert code == 2, out
    assert "high 40000 is beyond the table it indexes 'wte' (50 rows)" in out and "write high: 50" in out
    assert "tuning.yaml:" in out
