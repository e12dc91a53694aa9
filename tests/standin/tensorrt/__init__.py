"""STAND-IN for tests: a fake ``tensorrt`` module. It is NOT TensorRT and builds nothing for a GPU.

It mirrors the documented TensorRT 11.1 Python API surface that ``trt_routes.backends.tensorrt`` uses,
as written down in /work/shared/TENSORRT.md (itself from the trtexec README "Example 7: Global
performance tuner", ``include/NvInfer.h`` of the TensorRT 11.1 OSS release, the tensorrt 11.4 bindings'
docstrings, docs.nvidia.com/deeplearning/tensorrt/latest/performance/tuning.html, Torch-TensorRT PR
#4476) and the NVIDIA/TensorRT Python samples (common_runtime.py):

- ``__version__``; ``ILogger`` / ``Logger`` with ``Severity``; ``Builder(logger)``;
  ``create_network(flags)``; ``create_builder_config()``; ``create_optimization_profile()``;
  ``build_serialized_network(network, config)`` -> bytes, or None with errors sent to the logger.
- ``IBuilderConfig``: ``build_route`` is a read/write str whose setter silently ignores an invalid
  route (the real binding throws the C++ success flag away; the error goes to the logger only);
  ``all_build_routes`` returns the documented catalog JSON (every field a string, closed knobs
  ``-k=[a|b]``, open integer knobs ``=int32_t`` / ``=int``, a ``tuner_version``) built from the knob
  names seen in public material. Their defaults and help texts are illustrative, not TensorRT's.
  Also builder_optimization_level, hardware_compatibility_level, tiling_optimization_level,
  max_aux_streams, avg_timing_iterations, max_num_tactics, l2_limit_for_tiling, memory pool limits,
  flags, optimization profiles and the timing-cache API (create_timing_cache, set_timing_cache,
  get_timing_cache, ITimingCache.combine/serialize).
- ``OnnxParser(network, logger)``: ``parse(bytes, path)`` reads real ONNX with the ``onnx`` package;
  undecodable bytes and unsupported operators become ``ParserError`` s (desc, node, node_name,
  node_operator) listed by ``num_errors`` / ``get_error(i)``.
- ``Runtime(logger).deserialize_cuda_engine(bytes)``; the engine's I/O tensor API (num_io_tensors,
  get_tensor_name/mode/shape/dtype, get_tensor_profile_shape); ``IExecutionContext`` with
  set_input_shape, get_tensor_shape, set_tensor_address and execute_async_v3(stream), which reads the
  inputs from "device" memory through cuda-python's runtime (the stand-in one in tests), computes the
  outputs with onnxruntime on the host and writes them back.

Where the real bindings fail, the stand-in fails the same way (each checked against TensorRT 11.4's
bindings wheel by tests/backends/test_tensorrt_conformance.py, or taken from TensorRT's sources):
- ``Builder(logger)`` / ``Runtime(logger)`` raise ``TypeError("pybind11::init(): factory function returned
  nullptr")`` when TensorRT cannot make one (``STANDIN.factory_fails``); they never return None.
- ``Runtime.deserialize_cuda_engine`` refuses an engine built with ``BuilderFlag.VERSION_COMPATIBLE``
  (it embeds a lean runtime: host code) unless ``Runtime.engine_host_code_allowed`` is True, whose
  default is False (NvInferRuntime.h); such an engine loads on a later TensorRT of the same major version.
- timing-cache entries are keyed by layer, not by build route, so one cache shared by several routes
  hands one route's timings to another (``STANDIN.timing_hits`` counts reused entries per build).
- ``nptype`` raises TypeError for BF16, FP8, INT4, FP4 and E8M0; ``DataType.itemsize`` is 0.5 for INT4
  and FP4 and None for E8M0, as the real ``tensorrt/__init__.py`` defines it. Enum values are TensorRT's.
- ``config.build_route`` may read back normalised (``STANDIN.readback = "full"``: every knob in catalog
  order, defaults spelled out, integers re-printed), which only a canonical comparison survives.

Test controls live in ``STANDIN`` (drop knobs on set the way a compiler override might, replace the
catalog text, fail builds). ``inspect_engine(bytes)`` decodes what a stand-in engine recorded."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

__version__ = "11.1.0.106"
__standin__ = True

ENGINE_MAGIC = b"TRT-STANDIN-ENGINE\n"
CACHE_MAGIC = b"TRT-STANDIN-TIMING-CACHE\n"


def _knob(option: str, allowed: str, default: str, help_text: str) -> dict[str, str]:
    return {
        "option": option,
        "allowed_values": f"{option}={allowed}",
        "default_value": default,
        "help": help_text,
    }


CATALOG: dict[str, Any] = {
    "tuner_version": "2.19.45",
    "tuner_options": [
        _knob("-conv_use_long_w", "[on|off]", "on", "stand-in: long-W convolution kernels"),
        _knob("-kgen:codegen:cuda_tile", "[0|1|2|3]", "1", "stand-in: CUDA tile code generation"),
        _knob("-kgen:tiling", "[0|1|2]", "0", "stand-in: kernel generator tiling"),
        _knob("-match_ragged_mha", "[on|off]", "on", "stand-in: ragged multi-head attention matching"),
        _knob("-copy_ppg", "[on|off]", "on", "stand-in: copy elimination pass"),
        _knob("-reshape_ppg", "[on|off]", "on", "stand-in: reshape elimination pass"),
        _knob("-transpose_ppg", "[on|off]", "on", "stand-in: transpose elimination pass"),
        _knob("-slice_fusion", "[ on | off ]", "on", "stand-in: slice fusion"),
        _knob("-conv_lowering", "[0|1|2]", "0", "stand-in: convolution lowering strategy"),
        _knob("-cask_fusion:num_tactics", "int32_t", "8", "stand-in: tactics tried per fused node"),
        _knob("-peep:max", "int", "16", "stand-in: peephole iterations"),
    ],
}


@dataclass
class _Controls:
    """Knobs for tests; not part of TensorRT."""

    catalog_json: str = field(default_factory=lambda: json.dumps(CATALOG))
    dropped_knobs: set[str] = field(default_factory=set)  # silently removed on set, like an override
    fail_build: str | None = None  # build_serialized_network logs this error and returns None
    device_name: str = "NVIDIA H200"
    #: trt.Builder / trt.Runtime fail as pybind11 does when TensorRT's factory returns NULL (no GPU, ...)
    factory_fails: bool = False
    #: "as_set": build_route reads back as set; "full": normalised (catalog order, defaults, integers)
    readback: str = "as_set"
    #: timing-cache entries each build found already timed, in build order
    timing_hits: list[int] = field(default_factory=list)
    #: the engine holds an operation CUDA graph capture does not permit: enqueue fails while capturing
    capture_fails: bool = False
    #: Real engines are not bit-reproducible (tactic timings differ between builds): set, every engine gets a
    #: random build id. Workers are separate processes, so the environment variable sets it there.
    nondeterministic: bool = field(default_factory=lambda: bool(os.environ.get("TRT_STANDIN_NONDETERMINISTIC")))


STANDIN = _Controls()


# -- enums ---------------------------------------------------------------------------------------
class _Severity(IntEnum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


class ILogger:
    Severity = _Severity

    def __init__(self) -> None:
        pass

    def log(self, severity: _Severity, msg: str) -> None:
        raise NotImplementedError


class IProfiler:
    """Receives each layer's time of an inference (``IExecutionContext.profiler``)."""

    def __init__(self) -> None:
        pass

    def report_layer_time(self, layer_name: str, ms: float) -> None:
        raise NotImplementedError


class Logger(ILogger):
    Severity = _Severity
    INTERNAL_ERROR = _Severity.INTERNAL_ERROR
    ERROR = _Severity.ERROR
    WARNING = _Severity.WARNING
    INFO = _Severity.INFO
    VERBOSE = _Severity.VERBOSE

    def __init__(self, min_severity: _Severity = _Severity.WARNING) -> None:
        super().__init__()
        self.min_severity = min_severity

    def log(self, severity: _Severity, msg: str) -> None:
        if severity <= self.min_severity:
            print(f"[TRT] [{severity.name[0]}] {msg}")


class DataType(IntEnum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    FP8 = 6
    BF16 = 7
    INT64 = 8
    INT4 = 9
    FP4 = 10
    E8M0 = 11

    @property
    def itemsize(self) -> float | None:
        """Bytes per element as the real ``tensorrt/__init__.py`` gives them: 0.5 for INT4/FP4, None for E8M0."""
        return {0: 4, 1: 2, 2: 1, 3: 4, 4: 1, 5: 1, 6: 1, 7: 2, 8: 8, 9: 0.5, 10: 0.5}.get(int(self))


_NP = {
    DataType.FLOAT: np.float32,
    DataType.HALF: np.float16,
    DataType.INT8: np.int8,
    DataType.INT32: np.int32,
    DataType.BOOL: np.bool_,
    DataType.UINT8: np.uint8,
    DataType.INT64: np.int64,
}
_ONNX_TO_TRT = {
    1: DataType.FLOAT,
    10: DataType.HALF,
    3: DataType.INT8,
    6: DataType.INT32,
    9: DataType.BOOL,
    2: DataType.UINT8,
    7: DataType.INT64,
    16: DataType.BF16,
    17: DataType.FP8,
    22: DataType.INT4,
    23: DataType.FP4,
}


_TRT_TO_ONNX = {trt: onnx_type for onnx_type, trt in _ONNX_TO_TRT.items()}


def _host_type(trt_type: DataType) -> np.dtype[Any]:
    """How the stand-in holds a tensor on the host (not a TensorRT API; packed INT4/FP4 it cannot run)."""
    if trt_type in _NP:
        return np.dtype(_NP[trt_type])
    import ml_dtypes

    extra = {DataType.BF16: ml_dtypes.bfloat16, DataType.FP8: ml_dtypes.float8_e4m3fn}
    if trt_type not in extra:
        raise RuntimeError(f"the stand-in cannot run tensors of type {trt_type.name}")
    return np.dtype(extra[trt_type])


def nptype(trt_type: DataType) -> type:
    """The numpy type of a TensorRT DataType (TypeError where numpy has none, as the real one)."""
    if trt_type not in _NP:
        raise TypeError(f"Could not resolve TensorRT datatype to an equivalent numpy datatype: {trt_type!r}")
    return _NP[trt_type]


def volume(iterable: Any) -> int:
    out = 1
    for d in iterable:
        out *= int(d)
    return out


class TensorIOMode(IntEnum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class TensorLocation(IntEnum):
    DEVICE = 0
    HOST = 1


class MemoryPoolType(IntEnum):
    WORKSPACE = 0
    DLA_MANAGED_SRAM = 1
    DLA_LOCAL_DRAM = 2
    DLA_GLOBAL_DRAM = 3
    TACTIC_DRAM = 4
    TACTIC_SHARED_MEMORY = 5


class HardwareCompatibilityLevel(IntEnum):
    NONE = 0
    AMPERE_PLUS = 1
    SAME_COMPUTE_CAPABILITY = 2


class TilingOptimizationLevel(IntEnum):
    NONE = 0
    FAST = 1
    MODERATE = 2
    FULL = 3


class BuilderFlag(IntEnum):  # TensorRT 11 removed FP16/INT8/... (strong typing only); values are TensorRT's
    DEBUG = 2
    GPU_FALLBACK = 3
    REFIT = 4
    DISABLE_TIMING_CACHE = 5
    TF32 = 6
    VERSION_COMPATIBLE = 12
    EXCLUDE_LEAN_RUNTIME = 13
    STRICT_NANS = 23


class ProfilingVerbosity(IntEnum):
    LAYER_NAMES_ONLY = 0  # TensorRT's default
    NONE = 1
    DETAILED = 2


class LayerInformationFormat(IntEnum):
    ONELINE = 0
    JSON = 1


class NetworkDefinitionCreationFlag(IntEnum):
    STRONGLY_TYPED = 0  # a bit position; accepted and ignored in 11.x: every network is strongly typed


class Dims(tuple):  # type: ignore[type-arg]
    """A shape; -1 marks a dynamic dimension."""


# -- network and parser --------------------------------------------------------------------------
@dataclass
class ITensor:
    name: str
    shape: Dims
    dtype: DataType
    #: an integer input whose values are a shape (the stand-in: the shape input of a Reshape or Expand)
    is_shape_tensor: bool = False


class INetworkDefinition:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self._inputs: list[ITensor] = []
        self._outputs: list[ITensor] = []
        self._model: bytes = b""
        self._ops: list[str] = []
        self._layers: list[str] = []  # the ONNX nodes' names: the engine's layers (unfused, in order)

    num_inputs = property(lambda self: len(self._inputs))
    num_outputs = property(lambda self: len(self._outputs))
    num_layers = property(lambda self: len(self._ops))

    def get_input(self, index: int) -> ITensor:
        return self._inputs[index]

    def get_output(self, index: int) -> ITensor:
        return self._outputs[index]


class ErrorCode(IntEnum):
    SUCCESS = 0
    INTERNAL_ERROR = 1
    MEM_ALLOC_FAILED = 2
    MODEL_DESERIALIZE_FAILED = 3
    INVALID_VALUE = 4
    INVALID_GRAPH = 5
    INVALID_NODE = 6
    UNSUPPORTED_GRAPH = 7
    UNSUPPORTED_NODE = 8


class ParserError:
    def __init__(
        self, code: ErrorCode, desc: str, node: int = -1, node_name: str = "", node_operator: str = ""
    ) -> None:
        self._code, self._desc, self._node = code, desc, node
        self._node_name, self._node_operator = node_name, node_operator

    def code(self) -> ErrorCode:
        return self._code

    def desc(self) -> str:
        return self._desc

    def node(self) -> int:
        return self._node

    def node_name(self) -> str:
        return self._node_name

    def node_operator(self) -> str:
        return self._node_operator

    def file(self) -> str:
        return "ModelImporter.cpp"

    def line(self) -> int:
        return 0

    def func(self) -> str:
        return "parse"

    def __str__(self) -> str:
        return (
            f"In node {self._node} with name: {self._node_name} and operator: {self._node_operator} "
            f"({self.func()}): {self._code.name}: {self._desc}"
        )


SUPPORTED_OPS = frozenset(
    [
        "Abs",
        "Add",
        "And",
        "ArgMax",
        "ArgMin",
        "AveragePool",
        "BatchNormalization",
        "Cast",
        "Ceil",
        "Clip",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Conv",
        "ConvTranspose",
        "Cos",
        "CumSum",
        "DepthToSpace",
        "DequantizeLinear",
        "Div",
        "Einsum",
        "Elu",
        "Equal",
        "Erf",
        "Exp",
        "Expand",
        "Flatten",
        "Floor",
        "Gather",
        "GatherElements",
        "GatherND",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Greater",
        "GreaterOrEqual",
        "GroupNormalization",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "InstanceNormalization",
        "LayerNormalization",
        "LeakyRelu",
        "Less",
        "LessOrEqual",
        "Log",
        "LogSoftmax",
        "MatMul",
        "Max",
        "MaxPool",
        "Mean",
        "Min",
        "Mod",
        "Mul",
        "Neg",
        "NonZero",
        "Not",
        "OneHot",
        "Or",
        "Pad",
        "Pow",
        "PRelu",
        "QuantizeLinear",
        "Range",
        "Reciprocal",
        "ReduceL2",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "Relu",
        "Reshape",
        "Resize",
        "ScatterElements",
        "ScatterND",
        "Selu",
        "Shape",
        "Sigmoid",
        "Sign",
        "Sin",
        "Size",
        "Slice",
        "Softmax",
        "Softplus",
        "SpaceToDepth",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Sum",
        "Tanh",
        "Tile",
        "TopK",
        "Transpose",
        "Trilu",
        "Unsqueeze",
        "Where",
        "Xor",
    ]
)


class OnnxParser:
    def __init__(self, network: INetworkDefinition, logger: ILogger) -> None:
        self._network = network
        self._logger = logger
        self._errors: list[ParserError] = []

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, index: int) -> ParserError:
        return self._errors[index]

    def clear_errors(self) -> None:
        self._errors.clear()

    def parse_from_file(self, model: str) -> bool:
        with open(model, "rb") as f:
            return self.parse(f.read(), model)

    def parse(self, model: bytes, path: str | None = None) -> bool:
        import onnx

        self._errors.clear()
        try:
            proto = onnx.load_from_string(bytes(model))
            if not proto.graph.output:
                raise ValueError("the graph has no outputs")
        except Exception as exc:
            self._errors.append(
                ParserError(
                    ErrorCode.MODEL_DESERIALIZE_FAILED,
                    f"Failed to parse ONNX model{f' {path}' if path else ''}: {exc}",
                )
            )
            self._logger.log(_Severity.ERROR, self._errors[-1].desc())
            return False
        for index, node in enumerate(proto.graph.node):
            if node.domain not in ("", "ai.onnx") or node.op_type not in SUPPORTED_OPS:
                error = ParserError(
                    ErrorCode.UNSUPPORTED_NODE,
                    f"No importer registered for op: {node.op_type}",
                    index,
                    node.name,
                    node.op_type,
                )
                self._errors.append(error)
                self._logger.log(_Severity.ERROR, str(error))
        if self._errors:
            return False
        initializers = {t.name for t in proto.graph.initializer}
        net = self._network
        shape_inputs = _shape_values(proto.graph.node)
        net._inputs = [_tensor(v, v.name in shape_inputs) for v in proto.graph.input if v.name not in initializers]
        net._outputs = [_tensor(v) for v in proto.graph.output]
        net._ops = [n.op_type for n in proto.graph.node]
        net._layers = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(proto.graph.node)]
        net._model = bytes(model)
        return True


#: node inputs whose values are a shape, and the ops whose first (Gather, Unsqueeze...) or every (Concat, Cast...)
#: input carries those values on (what torch.onnx.export writes between a shape input and its Reshape)
_SHAPE_OPERANDS = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,)}
_CARRY_FIRST = ("Gather", "Unsqueeze", "Squeeze", "Slice")
_CARRY_ALL = ("Concat", "Cast", "Identity")


def _shape_values(nodes: Any) -> set[str]:
    """Every tensor whose values flow into a shape operand, as TensorRT finds a network's shape tensors."""
    producer = {out: node for node in nodes for out in node.output}
    stack = [n.input[i] for n in nodes for i in _SHAPE_OPERANDS.get(n.op_type, ()) if i < len(n.input)]
    found: set[str] = set()
    while stack:
        name = stack.pop()
        if name in found:
            continue
        found.add(name)
        node = producer.get(name)
        if node is not None and node.op_type in _CARRY_FIRST:
            stack.append(node.input[0])
        elif node is not None and node.op_type in _CARRY_ALL:
            stack.extend(node.input)
    return found


def _tensor(value: Any, shape_tensor: bool = False) -> ITensor:
    kind = value.type.tensor_type
    dims = Dims(d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim)
    return ITensor(value.name, dims, _ONNX_TO_TRT.get(kind.elem_type, DataType.FLOAT), shape_tensor)


# -- builder -------------------------------------------------------------------------------------
class IOptimizationProfile:
    def __init__(self) -> None:
        self._shapes: dict[str, tuple[Dims, Dims, Dims]] = {}
        self._values: dict[str, tuple[Dims, Dims, Dims]] = {}  # shape tensors' values (set_shape_input)

    def set_shape_input(self, input: str, min: Any, opt: Any, max: Any) -> None:
        lo, mid, hi = Dims(int(d) for d in min), Dims(int(d) for d in opt), Dims(int(d) for d in max)
        if not len(lo) == len(mid) == len(hi) or any(not (a <= b <= c) for a, b, c in zip(lo, mid, hi, strict=True)):
            raise RuntimeError("Shape values provided for min, opt and max are inconsistent.")
        self._values[input] = (lo, mid, hi)

    def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
        lo, mid, hi = Dims(int(d) for d in min), Dims(int(d) for d in opt), Dims(int(d) for d in max)
        if not len(lo) == len(mid) == len(hi):
            raise RuntimeError("Shape provided for min is inconsistent with other shapes.")
        if any(a < 0 for a in lo) or any(not (a <= b <= c) for a, b, c in zip(lo, mid, hi, strict=True)):
            raise RuntimeError("Shape provided for opt is inconsistent with other shapes.")
        self._shapes[input] = (lo, mid, hi)

    def get_shape(self, input: str) -> list[Dims]:
        return list(self._shapes.get(input, ()))


class ITimingCache:
    def __init__(self, entries: dict[str, str], version: str, device: str) -> None:
        self._entries = dict(entries)
        self._version, self._device = version, device

    def serialize(self) -> bytes:
        body = {"version": self._version, "device": self._device, "entries": self._entries}
        return CACHE_MAGIC + json.dumps(body, sort_keys=True).encode()

    def combine(self, input_cache: ITimingCache, ignore_mismatch: bool) -> bool:
        if not ignore_mismatch and (input_cache._version, input_cache._device) != (self._version, self._device):
            return False
        self._entries.update(input_cache._entries)
        return True

    def reset(self) -> bool:
        self._entries.clear()
        return True


def _route_problem(route: str, catalog: dict[str, Any]) -> str | None:
    options = {o["option"]: o for o in catalog.get("tuner_options", [])}
    seen: set[str] = set()
    for token in route.split():
        name, eq, value = token.partition("=")
        if not eq or name not in options:
            return f"unknown build-route token {token}"
        if name in seen:
            return f"duplicate knob {name}"
        seen.add(name)
        allowed = options[name]["allowed_values"]
        if "[" in allowed and "]" in allowed and "..." not in allowed:
            values = [v.strip() for v in allowed[allowed.index("[") + 1 : allowed.index("]")].split("|")]
            if value not in values:
                return f"value {value} is not allowed for {name}"
        else:
            try:
                int(value)
            except ValueError:
                return f"{name} takes an integer, got {value}"
    return None


class IBuilderConfig:
    def __init__(self, logger: ILogger) -> None:
        self._logger = logger
        self._route = ""
        self.builder_optimization_level = 3
        self.hardware_compatibility_level = HardwareCompatibilityLevel.NONE
        self.tiling_optimization_level = TilingOptimizationLevel.NONE
        self.max_aux_streams = -1
        self.avg_timing_iterations = 1
        self.max_num_tactics = -1
        self.l2_limit_for_tiling = -1
        self.profiling_verbosity = ProfilingVerbosity.LAYER_NAMES_ONLY
        self._pools: dict[MemoryPoolType, int] = {}
        self._flags: set[BuilderFlag] = {BuilderFlag.TF32}  # TensorRT's default (NvInfer.h: "enabled by default")
        self._profiles: list[IOptimizationProfile] = []
        self._timing_cache: ITimingCache | None = None

    @property
    def build_route(self) -> str:
        if STANDIN.readback != "full":
            return self._route
        catalog = json.loads(STANDIN.catalog_json or "{}").get("tuner_options", [])
        set_values = dict(t.partition("=")[::2] for t in self._route.split())
        out = []
        for option in catalog:
            value = set_values.get(option["option"], option["default_value"]).strip()
            out.append(f"{option['option']}={int(value) if value.lstrip('-').isdigit() else value}")
        return " ".join(out)

    @build_route.setter
    def build_route(self, route: str) -> None:
        problem = _route_problem(route, json.loads(STANDIN.catalog_json or "{}"))
        if problem:  # the real setter reports failure only through its (discarded) return value
            self._logger.log(_Severity.ERROR, f"setBuildRoute: {problem}; build route unchanged")
            return
        kept = [t for t in route.split() if t.partition("=")[0] not in STANDIN.dropped_knobs]
        self._route = " ".join(kept)

    @property
    def all_build_routes(self) -> str:
        return STANDIN.catalog_json

    @property
    def num_optimization_profiles(self) -> int:
        return len(self._profiles)

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        if not profile._shapes:
            self._logger.log(_Severity.ERROR, "addOptimizationProfile: profile sets no shapes")
            return -1
        self._profiles.append(profile)
        return len(self._profiles) - 1

    def set_memory_pool_limit(self, pool: MemoryPoolType, pool_size: int) -> None:
        self._pools[MemoryPoolType(pool)] = int(pool_size)

    def get_memory_pool_limit(self, pool: MemoryPoolType) -> int:
        return self._pools.get(MemoryPoolType(pool), 0)

    def set_flag(self, flag: BuilderFlag) -> None:
        self._flags.add(BuilderFlag(flag))

    def clear_flag(self, flag: BuilderFlag) -> None:
        self._flags.discard(BuilderFlag(flag))

    def get_flag(self, flag: BuilderFlag) -> bool:
        return BuilderFlag(flag) in self._flags

    def create_timing_cache(self, serialized_timing_cache: bytes) -> ITimingCache | None:
        blob = bytes(serialized_timing_cache)
        if not blob:
            return ITimingCache({}, __version__, STANDIN.device_name)
        if not blob.startswith(CACHE_MAGIC):
            self._logger.log(_Severity.ERROR, "createTimingCache: the blob is not a timing cache")
            return None
        body = json.loads(blob[len(CACHE_MAGIC) :])
        return ITimingCache(body["entries"], body["version"], body["device"])

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        if not ignore_mismatch and (cache._version, cache._device) != (__version__, STANDIN.device_name):
            self._logger.log(
                _Severity.WARNING, "setTimingCache: cache was made by another TensorRT or device"
            )
            return False
        self._timing_cache = cache
        return True

    def get_timing_cache(self) -> ITimingCache | None:
        return self._timing_cache


def _factory(logger: ILogger, what: str) -> None:
    """pybind11 turns TensorRT's NULL from createInferBuilder/createInferRuntime into this TypeError."""
    if STANDIN.factory_fails:
        message = "Error Code 6: API Usage Error (CUDA initialization failure with error: 35)"
        logger.log(_Severity.ERROR, f"{what}: {message}")
        raise TypeError("pybind11::init(): factory function returned nullptr")


class Builder:
    def __init__(self, logger: ILogger) -> None:
        _factory(logger, "createInferBuilder")
        self.logger = logger

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        return INetworkDefinition(flags)

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig(self.logger)

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> bytes | None:
        def error(message: str) -> None:
            self.logger.log(_Severity.ERROR, message)

        if not network._outputs:
            error("Network must have at least one output")
            return None
        profile = config._profiles[0]._shapes if config._profiles else {}
        values = config._profiles[0]._values if config._profiles else {}
        for tensor in network._inputs:
            if tensor.is_shape_tensor:  # TensorRT needs its values (set_shape_input), one per element
                if tensor.name not in values or tensor.name in profile:
                    error(f"Network has dynamic or shape inputs, but no optimization profile sets the values of "
                          f"shape tensor {tensor.name}")
                    return None
                if any(len(v) != volume(tensor.shape) for v in values[tensor.name]):
                    error(f"{tensor.name}: shape tensor of shape {list(tensor.shape)} given "
                          f"{len(values[tensor.name][1])} values")
                    return None
                continue
            dynamic = any(d < 0 for d in tensor.shape)
            if tensor.name not in profile:
                if dynamic:
                    error(
                        f"Network has dynamic or shape inputs, but no optimization profile sets {tensor.name}"
                    )
                    return None
                continue
            for label, dims in zip(("min", "opt", "max"), profile[tensor.name], strict=True):
                if len(dims) != len(tensor.shape) or any(
                    s >= 0 and s != d for s, d in zip(tensor.shape, dims, strict=True)
                ):
                    error(f"{tensor.name}: {label} dimensions {list(dims)} do not match {list(tensor.shape)}")
                    return None
        if STANDIN.fail_build:
            error(STANDIN.fail_build)
            return None
        cache = config._timing_cache or ITimingCache({}, __version__, STANDIN.device_name)
        hits = misses = 0
        opt = {n: list(s[1]) for n, s in profile.items()}
        for index, op in enumerate(network._ops):
            # like TensorRT's, the key names the layer and its shapes, not the build route
            key = hashlib.sha256(f"{op}:{index}:{sorted(opt.items())}".encode()).hexdigest()[:16]
            if key in cache._entries:
                hits += 1
            else:
                misses += 1
                cache._entries[key] = f"tactic-{int(key[:4], 16) % 7}"
        STANDIN.timing_hits.append(hits)
        self.logger.log(_Severity.INFO, f"Timing cache: {hits} hits, {misses} misses")
        body = {
            "version": __version__,
            "device": STANDIN.device_name,
            "build_route": config._route,
            "builder_optimization_level": config.builder_optimization_level,
            "hardware_compatibility_level": HardwareCompatibilityLevel(
                config.hardware_compatibility_level
            ).name,
            "tiling_optimization_level": TilingOptimizationLevel(config.tiling_optimization_level).name,
            "max_aux_streams": config.max_aux_streams,
            "avg_timing_iterations": config.avg_timing_iterations,
            "max_num_tactics": config.max_num_tactics,
            "l2_limit_for_tiling": config.l2_limit_for_tiling,
            "memory_pools": {p.name: v for p, v in sorted(config._pools.items())},
            "flags": sorted(f.name for f in config._flags),
            "profile": {n: [list(d) for d in s] for n, s in profile.items()},
            "values": {n: [list(d) for d in s] for n, s in values.items()},
            "io": [
                {"name": t.name, "mode": "INPUT", "dtype": t.dtype.name, "shape": list(t.shape),
                 "location": "HOST" if t.is_shape_tensor else "DEVICE"}
                for t in network._inputs
            ]
            + [
                {"name": t.name, "mode": "OUTPUT", "dtype": t.dtype.name, "shape": list(t.shape)}
                for t in network._outputs
            ],
            "model": base64.b64encode(network._model).decode(),
            "layers": list(network._layers),
            "layer_types": list(network._ops),
            "profiling_verbosity": ProfilingVerbosity(config.profiling_verbosity).name,
        }
        if STANDIN.nondeterministic:
            body["build_id"] = os.urandom(8).hex()
        self.logger.log(_Severity.INFO, "Engine generation completed (stand-in)")
        return ENGINE_MAGIC + json.dumps(body).encode()


# -- runtime -------------------------------------------------------------------------------------
def inspect_engine(blob: bytes) -> dict[str, Any]:
    """What a stand-in engine recorded (route, settings, profile, I/O); not a TensorRT API."""
    data = bytes(blob)
    if not data.startswith(ENGINE_MAGIC):
        raise ValueError("not a stand-in engine")
    body: dict[str, Any] = json.loads(data[len(ENGINE_MAGIC) :])
    return body


class Runtime:
    def __init__(self, logger: ILogger) -> None:
        _factory(logger, "createInferRuntime")
        self.logger = logger
        self.engine_host_code_allowed = False

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine | None:
        try:
            body = inspect_engine(serialized_engine)
        except (ValueError, json.JSONDecodeError):
            self.logger.log(_Severity.ERROR, "IRuntime::deserializeCudaEngine: the blob is not an engine")
            return None
        compatible = "VERSION_COMPATIBLE" in body["flags"]
        if compatible and "EXCLUDE_LEAN_RUNTIME" not in body["flags"] and not self.engine_host_code_allowed:
            self.logger.log(
                _Severity.ERROR,
                "IRuntime::deserializeCudaEngine: the engine has host code (an embedded lean runtime) and "
                "engine host code is not allowed: set IRuntime::setEngineHostCodeAllowed(true)",
            )
            return None
        same_major = body["version"].split(".")[0] == __version__.split(".")[0]
        newer = tuple(int(p) for p in body["version"].split(".")) <= tuple(int(p) for p in __version__.split("."))
        if body["version"] != __version__ and not (compatible and same_major and newer):
            self.logger.log(
                _Severity.ERROR,
                f"The engine plan file is not compatible with this version of "
                f"TensorRT, expecting {__version__}, got {body['version']}",
            )
            return None
        return ICudaEngine(body, self.logger)


class ICudaEngine:
    def __init__(self, body: dict[str, Any], logger: ILogger) -> None:
        self._body = body
        self._logger = logger
        self._io = {t["name"]: t for t in body["io"]}
        self._names = [t["name"] for t in body["io"]]
        self._session: Any = None

    num_io_tensors = property(lambda self: len(self._names))
    num_optimization_profiles = property(lambda self: 1 if self._body["profile"] or self._body.get("values") else 0)

    def get_tensor_name(self, index: int) -> str:
        return self._names[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode[self._io[name]["mode"]] if name in self._io else TensorIOMode.NONE

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType[self._io[name]["dtype"]]

    def get_tensor_shape(self, name: str) -> Dims:
        return Dims(self._io[name]["shape"])

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[Dims]:
        return [Dims(d) for d in self._body["profile"].get(name, [])]

    def get_tensor_location(self, name: str) -> TensorLocation:
        return TensorLocation[self._io[name].get("location", "DEVICE")]

    def is_shape_inference_io(self, name: str) -> bool:
        """An input whose values are read on the host to infer shapes (a shape tensor)."""
        return name in self._io and self.get_tensor_location(name) == TensorLocation.HOST

    def create_execution_context(self) -> IExecutionContext:
        return IExecutionContext(self)

    def create_engine_inspector(self) -> EngineInspector:
        return EngineInspector(self)

    @property
    def num_layers(self) -> int:
        return len(self._body.get("layers") or [])

    def serialize(self) -> bytes:
        return ENGINE_MAGIC + json.dumps(self._body).encode()

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by onnxruntime on the host, exchanged as OrtValues of the engine's element types (numpy
        has no bfloat16 or float8: their bytes travel as unsigned integers of the same size)."""
        import ctypes

        import onnxruntime as ort

        if self._session is None:
            self._session = ort.InferenceSession(
                base64.b64decode(self._body["model"]), providers=["CPUExecutionProvider"]
            )
        values = {}
        for name, array in feeds.items():
            trt_type = self.get_tensor_dtype(name)
            data = array.view(f"u{array.itemsize}") if trt_type in (DataType.BF16, DataType.FP8) else array
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                np.ascontiguousarray(data), _TRT_TO_ONNX[trt_type]
            )
        names = [o.name for o in self._session.get_outputs()]
        outputs = {}
        for name, value in zip(names, self._session.run_with_ort_values(names, values), strict=True):
            host = _host_type(self.get_tensor_dtype(name))
            shape = tuple(value.shape())
            size = volume(shape) * host.itemsize
            raw = ctypes.string_at(value.data_ptr(), size) if size else b""
            outputs[name] = np.frombuffer(raw, dtype=host).reshape(shape).copy()
        return outputs


def _cudart() -> Any:
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda import cudart as runtime
    return runtime


class EngineInspector:
    """What an engine holds, as TensorRT's inspector prints it: at LAYER_NAMES_ONLY (the default verbosity) the
    layers' names, at DETAILED each layer's name, type and tactic (the route picks tactics, as the timing cache
    entries do), at NONE nothing."""

    def __init__(self, engine: ICudaEngine) -> None:
        self._engine = engine

    def _layer(self, index: int) -> Any:
        body = self._engine._body
        name = body["layers"][index]
        verbosity = body.get("profiling_verbosity", "LAYER_NAMES_ONLY")
        if verbosity == "NONE":
            return None
        if verbosity != "DETAILED":
            return name
        op = body["layer_types"][index]
        tactic = int(hashlib.sha256(f"{body.get('build_route', '')}|{name}".encode()).hexdigest()[:4], 16) % 7
        return {"Name": name, "LayerType": op, "TacticName": f"sm90_standin_{op.lower()}_tactic{tactic}"}

    def get_layer_information(self, layer_index: int, format: LayerInformationFormat) -> str:
        info = self._layer(layer_index)
        if LayerInformationFormat(format) == LayerInformationFormat.JSON:
            return json.dumps(info) if info is not None else ""
        return str(info.get("Name") if isinstance(info, dict) else info or "")

    def get_engine_information(self, format: LayerInformationFormat) -> str:
        layers = [self._layer(i) for i in range(self._engine.num_layers)]
        if LayerInformationFormat(format) == LayerInformationFormat.JSON:
            return json.dumps({"Layers": [x for x in layers if x is not None], "Bindings": self._engine._names})
        return "\n".join(str(x.get("Name") if isinstance(x, dict) else x) for x in layers if x is not None)


class IExecutionContext:
    def __init__(self, engine: ICudaEngine) -> None:
        self.engine = engine
        self._shapes: dict[str, Dims] = {}
        self._addresses: dict[str, int] = {}
        self._output_shapes: dict[tuple[Any, ...], dict[str, Dims]] = {}
        #: ``IProfiler`` attached (None: no layer timing); with ``enqueue_emits_profile`` (TensorRT's default
        #: True) every enqueue reports its layers' times, else ``report_to_profiler()`` reports the last one's
        self.profiler: IProfiler | None = None
        self.enqueue_emits_profile = True
        self._layer_ms: list[tuple[str, float]] = []

    def report_to_profiler(self) -> bool:
        if self.profiler is None or not self._layer_ms:
            return False
        for name, ms in self._layer_ms:
            self.profiler.report_layer_time(name, ms)
        return True

    def _time_layers(self, run_ms: float) -> None:
        """Share one inference's time among the engine's layers: fixed weights per layer and build route (so
        a route that changes tactics changes the layers' times, as in TensorRT), scaled to the run."""
        layers = self.engine._body.get("layers") or []
        route = self.engine._body.get("build_route") or ""
        weights = [1 + int(hashlib.sha256(f"{route}|{name}".encode()).hexdigest()[:4], 16) % 9 for name in layers]
        total = sum(weights) or 1
        self._layer_ms = [(name, run_ms * w / total) for name, w in zip(layers, weights, strict=True)]
        if self.profiler is not None and self.enqueue_emits_profile:
            self.report_to_profiler()

    def _inputs(self) -> list[str]:
        return [n for n in self.engine._names if self.engine.get_tensor_mode(n) == TensorIOMode.INPUT]

    def set_input_shape(self, name: str, shape: Any) -> bool:
        dims = Dims(int(d) for d in shape)
        declared = self.engine.get_tensor_shape(name)
        bounds = self.engine.get_tensor_profile_shape(name, 0)
        ok = self.engine.get_tensor_mode(name) == TensorIOMode.INPUT and len(dims) == len(declared)
        ok = ok and all(s < 0 or s == d for s, d in zip(declared, dims, strict=False))
        if ok and bounds:
            ok = all(lo <= d <= hi for lo, d, hi in zip(bounds[0], dims, bounds[2], strict=True))
        if not ok:
            self.engine._logger.log(
                _Severity.ERROR, f"setInputShape: {name} {list(dims)} is outside the profile"
            )
            return False
        self._shapes[name] = dims
        return True

    def _host_values(self, name: str) -> np.ndarray:
        """A shape tensor's values, read from the host memory its address points at (TensorRT reads them on
        the host, at shape inference and at enqueue)."""
        import ctypes

        host = _host_type(self.engine.get_tensor_dtype(name))
        count = volume(self._shapes.get(name, self.engine.get_tensor_shape(name)))
        raw = ctypes.string_at(self._addresses[name], count * host.itemsize) if count else b""
        return np.frombuffer(raw, dtype=host).reshape(self._shapes.get(name, ())).copy()

    def _out_of_profile(self) -> str | None:
        bounds = self.engine._body.get("values") or {}
        for name in self._inputs():
            if self.engine.is_shape_inference_io(name) and name in bounds:
                lo, _opt, hi = bounds[name]
                got = [int(v) for v in self._host_values(name).reshape(-1)]
                if any(not (a <= v <= b) for a, v, b in zip(lo, got, hi, strict=True)):
                    return f"shape tensor {name} values {got} are outside the profile [{lo}, {hi}]"
        return None

    def _ready(self) -> bool:
        """Every input has a shape, and every shape tensor an address (its values)."""
        return all(n in self._shapes and (n in self._addresses or not self.engine.is_shape_inference_io(n))
                   for n in self._inputs())

    def _output_shape_table(self) -> dict[str, Dims]:
        shape_inputs = [n for n in self._inputs() if self.engine.is_shape_inference_io(n)]
        values = {n: tuple(int(v) for v in self._host_values(n).reshape(-1)) for n in shape_inputs}
        key = (tuple(sorted(self._shapes.items())), tuple(sorted(values.items())))
        if key not in self._output_shapes:
            feeds = {
                n: self._host_values(n) if n in values else
                np.zeros(self._shapes[n], dtype=_host_type(self.engine.get_tensor_dtype(n)))
                for n in self._inputs()
            }
            self._output_shapes[key] = {n: Dims(a.shape) for n, a in self.engine._run(feeds).items()}
        return self._output_shapes[key]

    def get_tensor_shape(self, name: str) -> Dims:
        if self.engine.get_tensor_mode(name) == TensorIOMode.INPUT:
            return self._shapes.get(name, self.engine.get_tensor_shape(name))
        if not self._ready() or self._out_of_profile():
            return self.engine.get_tensor_shape(name)
        return self._output_shape_table()[name]

    def set_tensor_address(self, name: str, memory: int) -> bool:
        if name not in self.engine._io:
            return False
        self._addresses[name] = int(memory)
        return True

    def get_tensor_address(self, name: str) -> int:
        return self._addresses.get(name, 0)

    def execute_async_v3(self, stream_handle: int) -> bool:
        rt = _cudart()
        capture = getattr(rt, "_capture_of", lambda _s: None)(stream_handle)
        if capture is not None or getattr(rt, "_is_capturing", lambda _s: False)(stream_handle):
            if STANDIN.capture_fails or capture is None:  # an operation a graph cannot hold
                rt._invalidate_capture(stream_handle)
                self.engine._logger.log(_Severity.ERROR, "enqueueV3: operation not permitted when stream is capturing")
                return False
            capture.append(lambda: self._execute_now(rt))  # runs at cudaGraphLaunch, like captured kernels
            return True
        return self._execute_now(rt)

    def _execute_now(self, rt: Any) -> bool:
        names = self.engine._names
        if any(n not in self._addresses for n in names) or any(n not in self._shapes for n in self._inputs()):
            self.engine._logger.log(_Severity.ERROR, "enqueueV3: not every tensor has a shape and an address")
            return False
        problem = self._out_of_profile()
        if problem:
            self.engine._logger.log(_Severity.ERROR, f"enqueueV3: {problem}")
            return False
        feeds = {}
        for name in self._inputs():
            if self.engine.is_shape_inference_io(name):  # host memory: read in place, never copied to the device
                feeds[name] = self._host_values(name)
                continue
            host = np.empty(self._shapes[name], dtype=_host_type(self.engine.get_tensor_dtype(name)))
            if host.nbytes:
                (err,) = rt.cudaMemcpy(
                    host.ctypes.data,
                    self._addresses[name],
                    host.nbytes,
                    rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                )
                if err != rt.cudaError_t.cudaSuccess:
                    self.engine._logger.log(_Severity.ERROR, f"enqueueV3: reading {name} failed: {err}")
                    return False
            feeds[name] = host
        started = time.perf_counter()
        results = self.engine._run(feeds)
        if self.profiler is not None:
            self._time_layers((time.perf_counter() - started) * 1000.0)
        for name, value in results.items():
            out = np.ascontiguousarray(value)
            if out.nbytes:
                (err,) = rt.cudaMemcpy(
                    self._addresses[name],
                    out.ctypes.data,
                    out.nbytes,
                    rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
                )
                if err != rt.cudaError_t.cudaSuccess:
                    self.engine._logger.log(_Severity.ERROR, f"enqueueV3: writing {name} failed: {err}")
                    return False
        return True
