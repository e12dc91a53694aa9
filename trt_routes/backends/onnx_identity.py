"""The structural identity of an ONNX graph: what two builds of one route share when their bytes do not.

ONNX Runtime's optimized model is not byte-deterministic: the NchwcTransformer names the nodes and tensors
it inserts from a counter (``ReorderOutput_token_53`` in one build, ``_54`` in the next) and may emit
independent nodes in another order. The identity hashes what the graph computes instead: every node by
its operator, domain, attributes and the identities of its inputs (graph inputs by name, constants by
dtype, shape and bytes), so generated names and the order of independent nodes do not count, while any
change of operator, attribute, weight or wiring does."""

from __future__ import annotations

import hashlib
from pathlib import Path

import onnx
from onnx import numpy_helper

IDENTITY_VERSION = "onnx-graph/1"


def _h(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _attribute(attr: onnx.AttributeProto) -> object:
    if attr.type == onnx.AttributeProto.GRAPH:
        return ("graph", graph_identity(attr.g))
    if attr.type == onnx.AttributeProto.GRAPHS:
        return ("graphs", tuple(graph_identity(g) for g in attr.graphs))
    if attr.type == onnx.AttributeProto.TENSOR:
        return ("tensor", _constant(attr.t))
    return repr(onnx.helper.get_attribute_value(attr))


def _constant(t: onnx.TensorProto) -> str:
    return _h("const", t.data_type, tuple(t.dims), hashlib.sha256(numpy_helper.to_array(t).tobytes()).hexdigest())


def graph_identity(graph: onnx.GraphProto, outer: dict[str, str] | None = None) -> str:
    """The identity of ``graph`` (nodes in the topological order ONNX requires of a saved graph)."""
    values: dict[str, str] = dict(outer or {})
    for i in graph.input:
        values.setdefault(i.name, _h("input", i.name))
    for t in graph.initializer:
        values[t.name] = _constant(t)
    nodes: list[str] = []
    for node in graph.node:
        attrs = tuple(sorted((a.name, _attribute(a)) for a in node.attribute))
        inputs = tuple(values.get(name, _h("free", name)) if name else "" for name in node.input)
        ident = _h(node.op_type, node.domain, attrs, inputs)
        nodes.append(ident)
        for k, name in enumerate(node.output):
            if name:
                values[name] = _h(ident, k)
    outputs = tuple((o.name, values.get(o.name, _h("free", o.name))) for o in graph.output)
    return _h(outputs, tuple(sorted(nodes)))


def model_identity(path: Path) -> str:
    """``IDENTITY_VERSION:<sha256>`` of the ONNX model at ``path`` (external data resolved beside it)."""
    model = onnx.load(str(path))
    return f"{IDENTITY_VERSION}:{graph_identity(model.graph)}"
