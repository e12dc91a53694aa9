"""Model files: an ONNX model and every external-data file it names.

Together they are the model: its digest covers every one of them, and they travel together (to a Ray
node, into a worker). The graph's inputs and outputs are read here too (without the weights), so that
validation can check the manifest against the model without building anything."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trt_routes import canonical
from trt_routes.errors import TrtRoutesError
from trt_routes.files import memo

#: ONNX element types (TensorProto.DataType) by number, named as the manifest names dtypes.
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
               8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
               16: "bfloat16"}


class ModelFileError(TrtRoutesError):
    """A model file (or one of its external-data files) is missing, unreadable or not ONNX."""

    def __init__(self, path: Path, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.path = path


@dataclass(frozen=True)
class TensorInfo:
    """One graph input or output: its name, dtype and dims (int: static, str: symbolic, None: unknown)."""

    name: str
    dtype: str
    dims: tuple[int | str | None, ...] | None  # None: the rank itself is unknown


@dataclass(frozen=True)
class ModelFiles:
    """A model file and the external-data files it names (``side``: location as written -> path)."""

    path: Path
    side: tuple[tuple[str, Path], ...] = ()
    inputs: tuple[TensorInfo, ...] | None = None  # None: not an ONNX model (a .pt2, a landscape)
    outputs: tuple[TensorInfo, ...] | None = None
    #: integer input -> (exclusive bound, why): the rows of the weight table it indexes (an embedding)
    index_limits: dict[str, tuple[int, str]] = field(default_factory=dict, compare=False)
    _shas: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def files(self) -> list[tuple[str, Path]]:
        """(name relative to the model's folder, path) of every file, the model first."""
        return [(self.path.name, self.path), *self.side]

    def sha256(self, rel: str) -> str:
        if rel not in self._shas:
            self._shas[rel] = canonical.file_sha256(dict(self.files)[rel])
        return self._shas[rel]

    @property
    def digest(self) -> str:
        """The model's digest: the file's sha256 alone when it names no external data (so digests of such
        models did not change), else a digest over every file's name and sha256."""
        model_sha = self.sha256(self.path.name)
        if not self.side:
            return model_sha
        return canonical.digest({"model": model_sha,
                                 "external_data": {rel: self.sha256(rel) for rel, _ in self.side}})


#: Model files that are not ONNX: a torch.export program (torch-inductor), a recorded landscape (replay).
NOT_ONNX = (".pt2", ".json")


def is_onnx(path: Path) -> bool:
    """Whether ``path`` must be an ONNX model: every model file but those of ``NOT_ONNX``."""
    return path.suffix.lower() not in NOT_ONNX


def read_model_files(path: Path) -> ModelFiles:
    """The model files of ``path``; raises ModelFileError naming the file when something is wrong."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(path, f"model file not found: {path}",
                             "check the model's 'path' (relative to tuning.yaml)")
    if path.is_dir():
        raise ModelFileError(path, f"the model path is a directory, not a file: {path}",
                             "point 'path' at the model file inside it")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ModelFileError(path, f"cannot read model file {path}: {exc.strerror}") from exc
    if size == 0:
        raise ModelFileError(path, f"the model file is empty: {path}", "export the model again")
    if not is_onnx(path):
        return ModelFiles(path)
    sha = _sha256(path)
    graph = _graph_facts(path, sha)
    side = tuple((rel, _side_path(path, rel)) for rel in graph["external"])
    inputs = tuple(_tensor_of(t) for t in graph["inputs"])
    outputs = tuple(_tensor_of(t) for t in graph["outputs"])
    limits = {name: (int(size), str(why)) for name, (size, why) in graph.get("index_limits", {}).items()}
    return ModelFiles(path, side, inputs, outputs, limits, _shas={path.name: sha})


def _sha256(path: Path) -> str:
    try:
        return canonical.file_sha256(path)
    except OSError as exc:
        raise ModelFileError(path, f"cannot read model file {path}: {exc.strerror or exc}") from exc


def _graph_facts(path: Path, sha: str) -> dict[str, Any]:
    """The external-data names, graph inputs (initializers left out) and outputs of the model whose bytes hash
    to ``sha``: remembered (``trt_routes.files.memo``) under that sha256, the installed onnx and this module's source,
    so a model seen before is not parsed again (nor onnx imported, ~25 ms of every command)."""
    key = {"model": sha, "onnx": memo.package_identity("onnx"), "code": memo.source_identity(__file__)}
    facts = memo.lookup("onnx-graph", key)
    if facts is None:
        proto = _load_proto(path)
        init = {t.name for t in proto.graph.initializer}
        facts = {"external": external_locations(proto),
                 "inputs": [_tensor_data(_tensor(v)) for v in proto.graph.input if v.name not in init],
                 "outputs": [_tensor_data(_tensor(v)) for v in proto.graph.output],
                 "index_limits": {v.name: found for v in proto.graph.input if v.name not in init
                                  and (found := index_range(proto.graph, v.name)) is not None}}
        memo.remember("onnx-graph", key, facts)
    return facts


def _tensor_data(info: TensorInfo) -> dict[str, Any]:
    return {"name": info.name, "dtype": info.dtype, "dims": None if info.dims is None else list(info.dims)}


def _tensor_of(data: dict[str, Any]) -> TensorInfo:
    dims = data["dims"]
    return TensorInfo(str(data["name"]), str(data["dtype"]), None if dims is None else tuple(dims))


def _load_proto(path: Path) -> Any:
    import onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except OSError as exc:
        raise ModelFileError(path, f"cannot read model file {path}: {exc.strerror or exc}") from exc
    except Exception as exc:  # protobuf's DecodeError and friends: the bytes are not a model
        raise ModelFileError(path, f"not an ONNX model: {path} ({type(exc).__name__}: {exc})",
                             "export the model with torch.onnx.export or onnx.save") from exc
    if not proto.HasField("graph") or not proto.graph.output:
        raise ModelFileError(path, f"not an ONNX model: {path} (no graph with outputs)",
                             "export the model with torch.onnx.export or onnx.save")
    return proto


#: Ops that pass their first input's values on unchanged (only its shape or type changes): token ids reach the
#: embedding's Gather through these in torch.onnx.export(dynamo=True) graphs (a GPT-2's View/Reshape).
SHAPE_ONLY = frozenset({"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Cast", "Identity", "Transpose", "View"})


def index_range(graph: Any, name: str) -> tuple[int, str] | None:
    """The exclusive upper bound of integer input ``name`` where it indexes a weight table (an embedding's
    Gather, reached directly or through shape-only ops): the table's size along the gathered axis, the
    smallest over every such use; None where it indexes none."""
    tables = {t.name: list(t.dims) for t in graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    best: tuple[int, str] | None = None
    seen, todo = {name}, [name]
    while todo:
        value = todo.pop()
        for node in consumers.get(value, []):
            if node.op_type in SHAPE_ONLY and node.input and node.input[0] == value:
                todo += [o for o in node.output if o not in seen]
                seen.update(node.output)
            elif node.op_type == "Gather" and len(node.input) >= 2 and node.input[1] == value:
                dims = tables.get(node.input[0])
                if not dims:
                    continue
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                size = int(dims[axis if axis >= 0 else axis + len(dims)])
                if best is None or size < best[0]:
                    best = (size, f"indexes '{node.input[0]}' ({size} rows)")
    return best


def external_locations(proto: Any) -> list[str]:
    """Every external-data location the model's tensors name (initializers, attributes, subgraphs), sorted."""
    found: set[str] = set()
    for tensor in onnx_tensors(proto.graph):
        if tensor.data_location == 1:  # TensorProto.EXTERNAL
            entries = {e.key: e.value for e in tensor.external_data}
            if entries.get("location"):
                found.add(entries["location"])
    return sorted(found)


def onnx_tensors(graph: Any) -> Iterator[Any]:
    """Every tensor a graph holds: initializers, attribute tensors, and those of its subgraphs."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from onnx_tensors(attr.g)
            for sub in attr.graphs:
                yield from onnx_tensors(sub)


def external_path(rel: str) -> Path:
    """External-data location ``rel`` as a relative path; raises ValueError for one that is absolute or climbs
    out of the model's folder (ONNX refuses those, and so do we)."""
    pure = PurePosixPath(rel.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ValueError(f"external data location '{rel}' lies outside the model's folder")
    return Path(*pure.parts)


def _side_path(model: Path, rel: str) -> Path:
    """Where external-data file ``rel`` lies: relative to the model's folder, and inside it."""
    try:
        side = model.parent / external_path(rel)
    except ValueError:
        raise ModelFileError(model, f"{model} names external data at '{rel}', outside the model's folder",
                             "save the model with its data next to it (onnx.save(..., location='x.data'))") from None
    if not side.is_file():
        raise ModelFileError(model, f"external data file not found: {side} (named by {model.name})",
                             "keep the .data file(s) next to the model as exported, or re-export the model")
    return side


def _tensor(value: Any) -> TensorInfo:
    ttype = value.type.tensor_type if value.type.HasField("tensor_type") else None
    if ttype is None:
        return TensorInfo(value.name, "unknown", None)
    dtype = ONNX_DTYPES.get(ttype.elem_type, f"type{ttype.elem_type}")
    if not ttype.HasField("shape"):
        return TensorInfo(value.name, dtype, None)
    dims: list[int | str | None] = []
    for d in ttype.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(str(d.dim_param))
        else:
            dims.append(None)
    return TensorInfo(value.name, dtype, tuple(dims))
