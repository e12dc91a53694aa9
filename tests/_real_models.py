"""A corpus of real-architecture models for tests: what users export is what trt-routes must tune.

Small ResNet- and BERT-like torch models exported in the test session with both ``torch.onnx.export``
exporters (the TorchScript one, ``dynamo=False``, and the new one, which writes external data), and ONNX
files written with external data by ``onnx.save``. Torch models are skipped cleanly where torch is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

SEQ, VOCAB, HIDDEN = 8, 50, 32


def external_data_mlp(folder: Path, *, location: str = "mlp.onnx.data", name: str = "mlp.onnx",
                      seed: int = 0) -> Path:
    """An MLP (dynamic batch, float32 ``x`` [N, 16] -> ``y`` [N, 8]) whose weights live in ``location``
    (relative to the model: the same folder or a subfolder)."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    path = folder / name
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
              size_threshold=0)
    return path


def rewrite_weights(model: Path, seed: int) -> list[Path]:
    """New weights in the external-data file(s) of ``model`` (same sizes); the .onnx bytes stay as they are."""
    from trt_routes.files.model_files import read_model_files

    files = read_model_files(model)
    rng = np.random.default_rng(seed)
    for _, side in files.side:
        data = rng.standard_normal(side.stat().st_size // 4).astype(np.float32).tobytes()
        side.write_bytes(data)
    return [p for _, p in files.side]


def _torch():
    return pytest.importorskip("torch")


def resnet_like(torch):  # type: ignore[no-untyped-def]
    nn = torch.nn

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(x + self.bn2(self.conv2(y)))

    class ResNetLike(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8),
                                      nn.ReLU())
            self.blocks = nn.Sequential(Block(8), Block(8))
            self.fc = nn.Linear(8, 10)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = self.blocks(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    torch.manual_seed(0)
    return ResNetLike().eval()


def bert_like(torch):  # type: ignore[no-untyped-def]
    nn = torch.nn

    class BertLike(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(VOCAB, HIDDEN)
            self.pos = nn.Embedding(64, HIDDEN)
            self.norm = nn.LayerNorm(HIDDEN)
            self.q, self.k, self.v = (nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
            self.ff = nn.Sequential(nn.Linear(HIDDEN, 64), nn.GELU(), nn.Linear(64, HIDDEN))
            self.pool = nn.Linear(HIDDEN, HIDDEN)

        def forward(self, input_ids):  # type: ignore[no-untyped-def]
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            h = self.norm(self.tok(input_ids) + self.pos(positions))
            att = torch.softmax(self.q(h) @ self.k(h).transpose(1, 2) / HIDDEN ** 0.5, dim=-1)
            h = self.norm(h + att @ self.v(h))
            h = self.norm(h + self.ff(h))
            return torch.tanh(self.pool(h[:, 0]))

    torch.manual_seed(0)
    return BertLike().eval()


def export(kind: str, folder: Path, *, dynamo: bool) -> Path:
    """``kind`` (``resnet`` or ``bert``) exported to ``folder/<kind>.onnx`` with dynamic batch (and sequence)
    axes; the new exporter (``dynamo=True``) is asked for external data."""
    torch = _torch()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}.onnx"
    if kind == "resnet":
        model, args, name = resnet_like(torch), (torch.randn(2, 3, 32, 32),), "input"
        axes = {0: "batch"}
    else:
        model, args, name = bert_like(torch), (torch.randint(0, VOCAB, (2, SEQ), dtype=torch.int64),), "input_ids"
        axes = {0: "batch", 1: "sequence"}
    if dynamo:
        pytest.importorskip("onnxscript")
        dim = torch.export.Dim
        shapes = ({axis: dim(label, min=1, max=64) for axis, label in axes.items()},)
        try:
            program = torch.onnx.export(model, args, input_names=[name], output_names=["logits"], dynamo=True,
                                        dynamic_shapes=shapes, external_data=True, optimize=False,
                                        verbose=False)
            program.save(str(path), external_data=True)
        except Exception as exc:  # the new exporter needs pieces some torch builds lack
            pytest.skip(f"torch.onnx.export(dynamo=True) does not work here: {type(exc).__name__}: {exc}")
    else:
        torch.onnx.export(model, args, str(path), input_names=[name], output_names=["logits"], dynamo=False,
                          dynamic_axes={name: axes, "logits": {0: "batch"}}, opset_version=17)
    return path


def token_model(folder: Path, name: str = "tok.onnx") -> Path:
    """A BERT-like input pair: int64 ``input_ids`` and ``attention_mask`` [batch, sequence] -> float32
    ``hidden`` [batch, sequence, 8] (an embedding lookup, masked), weights in external data."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((VOCAB, 8)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["emb"]),
             helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["maskf", "axis"], ["mask3"]),
             helper.make_node("Mul", ["emb", "mask3"], ["hidden"])]
    axis = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axis")
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
            for n in ("input_ids", "attention_mask")]
    graph = helper.make_graph(nodes, "tok", ints,
                              [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "sequence", 8])],
                              [table, axis])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / name), save_as_external_data=True, location=f"{name}.data", size_threshold=0)
    return folder / name
