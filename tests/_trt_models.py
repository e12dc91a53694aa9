"""Tiny ONNX models and shape profiles shared by the TensorRT backend tests (stand-in and real library)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(model: onnx.ModelProto, path: Path) -> str:
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return str(path)


def conv_model(path: Path) -> str:
    """x[N,3,8,8] -> Conv -> Relu -> GlobalAveragePool -> Flatten -> y[N,4] (dynamic batch)."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["y"], name="flatten"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [w, b],
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def custom_op_model(path: Path) -> str:
    """Two nodes of an operator no TensorRT importer knows (custom domain, no plugin)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("MyCustomOp", ["a"], ["b"], name="custom_a", domain="com.example"),
        helper.make_node("MyCustomOp", ["b"], ["y"], name="custom_b", domain="com.example"),
    ]
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
        ir_version=8,
    )
    onnx.save(model, path)
    return str(path)


def cast_model(path: Path, dtype: int) -> str:
    """x[N,3] (ONNX element type ``dtype``) -> Cast float -> Relu -> Cast back -> y[N,3]: I/O in a type numpy
    lacks (BFLOAT16 = 16, FLOAT8E4M3FN = 17), which a strongly typed TensorRT network keeps at its I/O."""
    nodes = [
        helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Cast", ["b"], ["y"], to=dtype),
    ]
    graph = helper.make_graph(
        nodes,
        "cast",
        [helper.make_tensor_value_info("x", dtype, ["N", 3])],
        [helper.make_tensor_value_info("y", dtype, ["N", 3])],
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), path)


PROFILE = {"x": {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}}
CAST_PROFILE = {"x": {"min": [1, 3], "opt": [2, 3], "max": [4, 3]}}


def reshape_model(path: Path) -> str:
    """x[N,12] -> Reshape(x, s) -> Relu -> y: ``s`` (int64[3]) is a shape tensor, its values the output's shape."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"), helper.make_node("Relu", ["r"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 12]),
              helper.make_tensor_value_info("s", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return _save(model, path)


#: x's dims and s's values at min/opt/max (s: the shape of the output, [N, 3, 4])
RESHAPE_PROFILE = {"x": {"min": [1, 12], "opt": [2, 12], "max": [4, 12]},
                   "s": {"min": [1, 3, 4], "opt": [2, 3, 4], "max": [4, 3, 4]}}


def exported_reshape_model(path: Path) -> str:
    """``reshape_model``'s computation exported by the real ``torch.onnx.export`` (TorchScript exporter): ``s``
    reaches the Reshape through Gather, Unsqueeze and Concat, as exporters write it."""
    import pytest

    torch = pytest.importorskip("torch")

    class Reshape(torch.nn.Module):
        def forward(self, x: Any, s: Any) -> Any:
            return torch.relu(x.reshape(s[0], s[1], s[2]))

    torch.onnx.export(Reshape(), (torch.zeros(2, 12), torch.tensor([2, 3, 4])), str(path), input_names=["x", "s"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, dynamo=False, opset_version=17)
    return str(path)
