"""Generate the two small, real ONNX models of the quickstart (opset 17, seeded weights).

Run ``python -m trt_routes.examples.make_models [FOLDER]`` (or ``recipes/quickstart/make_models.py`` in the
repository); the output is byte-for-byte deterministic."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the IR version of opset 17 (ONNX 1.12), readable by every onnxruntime >= 1.12
PRODUCER = "trt-routes quickstart"
SEED_RESNET = 1234
SEED_TRANSFORMER = 5678


class _Graph:
    """Collects nodes and initializers with unique, readable names."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=f"{output}_{op}", **attrs))
        return output

    def normal(self, shape: tuple[int, ...], std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
        return self.rng.uniform(low, high, shape).astype(np.float32)


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name=PRODUCER,
        producer_version="1",
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


# -- resnet_like ------------------------------------------------------------------------------

def _conv_bn(g: _Graph, x: str, name: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
    w = g.const(f"{name}.w", g.normal((cout, cin, k, k), float(np.sqrt(2.0 / (cin * k * k)))))
    pad = k // 2
    y = g.node("Conv", [x, w], f"{name}.conv", kernel_shape=[k, k], strides=[stride, stride],
               pads=[pad, pad, pad, pad])
    scale = g.const(f"{name}.bn.scale", g.uniform((cout,), 0.5, 1.5))
    bias = g.const(f"{name}.bn.bias", g.normal((cout,), 0.1))
    mean = g.const(f"{name}.bn.mean", g.normal((cout,), 0.1))
    var = g.const(f"{name}.bn.var", g.uniform((cout,), 0.5, 1.5))
    y = g.node("BatchNormalization", [y, scale, bias, mean, var], f"{name}.bn", epsilon=1e-5)
    if relu:
        y = g.node("Relu", [y], f"{name}.relu")
    return y


def _basic_block(g: _Graph, x: str, name: str, cin: int, cout: int, stride: int) -> str:
    y = _conv_bn(g, x, f"{name}.a", cin, cout, 3, stride, relu=True)
    y = _conv_bn(g, y, f"{name}.b", cout, cout, 3, 1, relu=False)
    shortcut = x if (cin == cout and stride == 1) else _conv_bn(g, x, f"{name}.proj", cin, cout, 1, stride,
                                                                   relu=False)
    y = g.node("Add", [y, shortcut], f"{name}.add")
    return g.node("Relu", [y], f"{name}.out")


def build_resnet_like() -> onnx.ModelProto:
    """A small CNN: conv+BN+Relu stem, three residual blocks (16, 32 stride 2, 32), GAP, Gemm to 10 logits.

    Input ``input`` [N,3,32,32] float32 (N symbolic); output ``logits`` [N,10]."""
    g = _Graph(np.random.default_rng(SEED_RESNET))
    x = _conv_bn(g, "input", "stem", 3, 16, 3, 1, relu=True)
    x = _basic_block(g, x, "block1", 16, 16, 1)
    x = _basic_block(g, x, "block2", 16, 32, 2)
    x = _basic_block(g, x, "block3", 32, 32, 1)
    x = g.node("GlobalAveragePool", [x], "pool")
    x = g.node("Flatten", [x], "flat", axis=1)
    w = g.const("fc.w", g.normal((10, 32), float(np.sqrt(1.0 / 32))))
    b = g.const("fc.b", g.normal((10,), 0.01))
    g.node("Gemm", [x, w, b], "logits", transB=1)
    graph = helper.make_graph(
        g.nodes,
        "resnet_like",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        g.inits,
    )
    return _model(graph)


# -- transformer_block ------------------------------------------------------------------------

D_MODEL = 64
HEADS = 4
HIDDEN = 256


def _linear(g: _Graph, x: str, name: str, cin: int, cout: int) -> str:
    w = g.const(f"{name}.w", g.normal((cin, cout), float(np.sqrt(1.0 / cin))))
    b = g.const(f"{name}.b", g.normal((cout,), 0.02))
    y = g.node("MatMul", [x, w], f"{name}.matmul")
    return g.node("Add", [y, b], f"{name}.out")


def _layer_norm(g: _Graph, x: str, name: str) -> str:
    scale = g.const(f"{name}.scale", g.uniform((D_MODEL,), 0.8, 1.2))
    bias = g.const(f"{name}.bias", g.normal((D_MODEL,), 0.02))
    return g.node("LayerNormalization", [x, scale, bias], f"{name}.out", axis=-1, epsilon=1e-5)


def build_transformer_block() -> onnx.ModelProto:
    """One pre-LN encoder block: 4-head self-attention and an Erf-GELU MLP, d_model 64, hidden 256.

    Input ``x`` [N,S,64] float32 (N, S symbolic); output ``y`` [N,S,64]."""
    g = _Graph(np.random.default_rng(SEED_TRANSFORMER))
    head_dim = D_MODEL // HEADS
    split_heads = g.const("shape.split_heads", np.array([0, 0, HEADS, head_dim], dtype=np.int64))
    merge_heads = g.const("shape.merge_heads", np.array([0, 0, D_MODEL], dtype=np.int64))
    scale = g.const("attn.scale", np.array(np.sqrt(head_dim), dtype=np.float32))

    h = _layer_norm(g, "x", "ln1")
    q = _linear(g, h, "attn.q", D_MODEL, D_MODEL)
    k = _linear(g, h, "attn.k", D_MODEL, D_MODEL)
    v = _linear(g, h, "attn.v", D_MODEL, D_MODEL)
    q = g.node("Reshape", [q, split_heads], "attn.q.heads")
    k = g.node("Reshape", [k, split_heads], "attn.k.heads")
    v = g.node("Reshape", [v, split_heads], "attn.v.heads")
    q = g.node("Transpose", [q], "attn.q.t", perm=[0, 2, 1, 3])  # [N,H,S,D]
    k = g.node("Transpose", [k], "attn.k.t", perm=[0, 2, 3, 1])  # [N,H,D,S]
    v = g.node("Transpose", [v], "attn.v.t", perm=[0, 2, 1, 3])  # [N,H,S,D]
    s = g.node("MatMul", [q, k], "attn.scores")
    s = g.node("Div", [s, scale], "attn.scaled")
    p = g.node("Softmax", [s], "attn.probs", axis=-1)
    c = g.node("MatMul", [p, v], "attn.context")
    c = g.node("Transpose", [c], "attn.context.t", perm=[0, 2, 1, 3])
    c = g.node("Reshape", [c, merge_heads], "attn.context.merged")
    o = _linear(g, c, "attn.o", D_MODEL, D_MODEL)
    x1 = g.node("Add", ["x", o], "residual1")

    h2 = _layer_norm(g, x1, "ln2")
    m = _linear(g, h2, "mlp.fc1", D_MODEL, HIDDEN)
    # GELU as x * 0.5 * (1 + erf(x / sqrt(2))): the exact pattern ORT's GeluFusion matches.
    sqrt2 = g.const("gelu.sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
    one = g.const("gelu.one", np.array(1.0, dtype=np.float32))
    half = g.const("gelu.half", np.array(0.5, dtype=np.float32))
    e = g.node("Div", [m, sqrt2], "gelu.div")
    e = g.node("Erf", [e], "gelu.erf")
    e = g.node("Add", [e, one], "gelu.add")
    e = g.node("Mul", [m, e], "gelu.mul")
    e = g.node("Mul", [e, half], "gelu.out")
    m2 = _linear(g, e, "mlp.fc2", HIDDEN, D_MODEL)
    g.node("Add", [x1, m2], "y")

    graph = helper.make_graph(
        g.nodes,
        "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", D_MODEL])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S", D_MODEL])],
        g.inits,
    )
    return _model(graph)


BUILDERS = {"resnet_like": build_resnet_like, "transformer_block": build_transformer_block}


def write_models(folder: Path) -> dict[str, Path]:
    """Write ``<name>.onnx`` for every quickstart model into ``folder``; return name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, build in BUILDERS.items():
        path = folder / f"{name}.onnx"
        path.write_bytes(build().SerializeToString(deterministic=True))
        onnx.checker.check_model(str(path), full_check=True)
        paths[name] = path
    return paths


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else Path.cwd()
    for name, path in write_models(folder).items():
        print(f"{name}: {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    main(sys.argv[1:])  # returns 0; a failure raises (only trt_routes.cli turns errors into exit codes)
