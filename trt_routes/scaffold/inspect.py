"""What a tuning.yaml needs to know about an ONNX model: its inputs (name, dtype, dims, static or symbolic),
integer inputs' valid range where the graph says it, and its floating-point precision.

Reads the graph only (``load_external_data=False``): weights in external files are never loaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trt_routes.errors import UsageError
from trt_routes.files.model_files import index_range

#: ONNX element types trt-routes can generate inputs for -> the manifest's dtype names.
DTYPES = {1: "float32", 10: "float16", 7: "int64", 6: "int32", 9: "bool"}
INTEGER = frozenset({"int64", "int32"})
FLOATS = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64"}

Dim = int | str  # a static size, or the name of a symbolic dimension


@dataclass(frozen=True)
class ModelInput:
    """One graph input. ``dims``: ints for static sizes, names for symbolic ones (unnamed ones get
    ``<input>_dim<i>``). ``high`` is the exclusive upper bound of an integer input when the graph gives it
    (the row count of the table it indexes), else None."""

    name: str
    dtype: str
    dims: tuple[Dim, ...]
    low: int | None = None
    high: int | None = None
    range_from: str = ""  # how low/high were inferred, e.g. "Gather of 'embed.weight' (30522 rows)"

    @property
    def symbols(self) -> list[str]:
        return [d for d in self.dims if isinstance(d, str)]


@dataclass(frozen=True)
class ModelInfo:
    """An ONNX model's inputs and the precision of its floating-point tensors (``float32`` unless any input
    or output is float16/bfloat16)."""

    path: Path
    inputs: tuple[ModelInput, ...]
    precision: str

    @property
    def symbols(self) -> list[str]:
        """Every symbolic dimension name, in order of first appearance."""
        return list(dict.fromkeys(s for i in self.inputs for s in i.symbols))


def inspect_onnx(path: Path) -> ModelInfo:
    """Read ``path``'s graph inputs. Raises UsageError for a file that is missing, not ONNX, or has an input
    trt-routes cannot generate data for."""
    import onnx

    if not path.is_file():
        raise UsageError(f"{path}: no such model file", "give the path of an .onnx file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, ValueError, ... for a file that is not a model
        raise UsageError(f"{path}: not an ONNX model ({type(exc).__name__}: {exc})",
                         "export it with torch.onnx.export or check the file") from None
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    inputs = []
    for value in graph.input:
        if value.name in initializers:  # IR < 4 lists weights as inputs too
            continue
        tensor = value.type.tensor_type
        elem = tensor.elem_type
        if not value.type.HasField("tensor_type") or elem not in DTYPES:
            kind = onnx.TensorProto.DataType.Name(elem) if value.type.HasField("tensor_type") else "non-tensor"
            raise UsageError(f"{path}: input '{value.name}' is {kind}; trt-routes generates float32, float16, "
                             "int64, int32 and bool inputs",
                             "export the model with inputs of one of those types, or give reference data "
                             "(models.<name>.reference) in tuning.yaml by hand")
        if not tensor.HasField("shape"):
            raise UsageError(f"{path}: input '{value.name}' has no shape (rank unknown)",
                             "export the model with input shapes (torch.onnx.export does)")
        dims: list[Dim] = []
        for i, d in enumerate(tensor.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param or f"{value.name}_dim{i}")
        dtype = DTYPES[elem]
        low = high = None
        why = ""
        if dtype in INTEGER:
            found = index_range(graph, value.name)
            if found is not None:
                low, high, why = 0, found[0], found[1]
        inputs.append(ModelInput(value.name, dtype, tuple(dims), low, high, why))
    if not inputs:
        raise UsageError(f"{path}: the model has no inputs", "nothing to feed: is this the right file?")
    elems = [v.type.tensor_type.elem_type for v in [*graph.input, *graph.output] if v.name not in initializers]
    precision = next((FLOATS[e] for e in elems if e in (10, 16)), "float32")
    return ModelInfo(path, tuple(inputs), precision)


