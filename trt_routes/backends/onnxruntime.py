"""ONNX Runtime (CPU) backend: the engine is ORT's optimized model, saved by a session with the route's knobs.

Build-phase knobs choose the graph optimizations; runtime-phase knobs are session options applied on load."""

from __future__ import annotations

__all__ = ["OnnxRuntimeBackend", "OnnxRuntimeRunner"]

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from trt_routes import catalog as catalog_module
from trt_routes.backends.base import Backend, BuildSpec, Feeds, Runner, time_on_host
from trt_routes.backends.native_log import captured_fd2
from trt_routes.backends.ort_graph import embed_external_data, op_counts, summarize_log
from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import RouteError
from trt_routes.files import memo

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime as ort

    from trt_routes.evidence.layers import LayerProfile

#: Bumped whenever the meaning of a knob (its mapping onto ORT) changes; enters the catalog.
KNOBS_VERSION = "ort-knobs/1"
PROVIDER = "CPUExecutionProvider"

LEVELS: dict[str, str] = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",  # onnxruntime >= 1.22
    "all": "ORT_ENABLE_ALL",
}
EXECUTION_MODES = {"sequential": "ORT_SEQUENTIAL", "parallel": "ORT_PARALLEL"}
# MEMORY_EFFICIENT is left out: it fails session creation in non-training builds.
EXECUTION_ORDERS = {"default": "DEFAULT", "priority_based": "PRIORITY_BASED"}

#: ``-disable:<Name>`` knobs -> the ORT graph transformer / rewrite rule names passed to
#: ``InferenceSession(disabled_optimizers=...)``, and what each one fuses (for the help text).
#: Each name was checked against onnxruntime 1.32 by its effect on an optimized graph (see the tests).
DISABLE: dict[str, tuple[tuple[str, ...], str]] = {
    "NchwcTransformer": (("NchwcTransformer",),
                         "level layout/all: rewrites Conv/pooling into MLAS NCHWc blocked-layout kernels "
                         "(com.microsoft.nchwc domain, fused activation and residual Add) with "
                         "ReorderInput/ReorderOutput at the boundaries. The engine is specific to the CPU's "
                         "SIMD width: ORT warns that such a model should only run where it was optimized"),
    "ConvBNFusion": (("ConvBNFusion",), "basic: folds BatchNormalization into the preceding Conv's weights"),
    "ConvActivationFusion": (("ConvActivationFusion",),
                             "extended: Conv + Relu/Clip/Sigmoid/... -> com.microsoft FusedConv"),
    "ConvAddActivationFusion": (("ConvAddActivationFusion",),
                                "extended: Conv + residual Add + Relu -> FusedConv with a sum input "
                                "(fires when NchwcTransformer does not)"),
    "GemmActivationFusion": (("GemmActivationFusion",), "extended: Gemm + activation -> FusedGemm"),
    "MatMulAddFusion": (("MatMulAddFusion",),
                        "basic: MatMul + bias Add -> Gemm (inputs of rank > 2 get Reshapes around the Gemm; "
                        "needs static shapes, see -free_dimension_overrides)"),
    "MatMulScaleFusion": (("MatMulScaleFusion",),
                          "extended: MatMul with a scalar Mul/Div before or after it -> FusedMatMul"),
    "ReshapeFusion": (("ReshapeFusion",),
                      "basic: folds Shape/Gather/Concat chains into constant Reshape targets"),
    "GeluFusion": (("GeluFusionL1", "GeluFusionL2"),
                   "the Erf formula x*0.5*(1+erf(x/sqrt2)) -> Gelu (ONNX Gelu at basic for opset >= 20, "
                   "com.microsoft Gelu at extended)"),
    "BiasGeluFusion": (("BiasGeluFusion",), "extended: bias Add + Gelu -> com.microsoft BiasGelu"),
    "QuickGeluFusion": (("QuickGeluFusion",), "extended: x*sigmoid(x) -> com.microsoft QuickGelu"),
    "LayerNormFusion": (("LayerNormFusionL1", "LayerNormFusionL2"),
                        "the ReduceMean/Sub/Pow/Sqrt/Div pattern -> LayerNormalization"),
    "SkipLayerNormFusion": (("SkipLayerNormFusion",),
                            "extended: residual Add + LayerNormalization -> SkipLayerNormalization"),
    "ConstantFolding": (("ConstantFolding",), "basic: evaluates nodes whose inputs are all constant"),
    "CommonSubexpressionElimination": (("CommonSubexpressionElimination",),
                                       "basic: merges identical nodes computing the same value"),
    "TransposeOptimizer": (("TransposeOptimizer", "TransposeOptimizer_CPUExecutionProvider"),
                           "basic and layout: pushes Transposes through other ops and cancels inverse pairs"),
}

#: ONNX Runtime's input type names as numpy dtype names (numpy is imported by the worker's runner only: the
#: coordinator's commands read this backend's catalog and signature, from the memo, without it).
_NP_TYPES: dict[str, str] = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int16)": "int16", "tensor(int8)": "int8",
    "tensor(uint8)": "uint8", "tensor(uint16)": "uint16", "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64", "tensor(bool)": "bool",
}
_MODIFIED = re.compile(r"GraphTransformer (\S+) modified: (\d+)")


def route_text(route: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(route.items()))


def _ort() -> Any:
    import onnxruntime

    return onnxruntime


def _flag(option: str, default: str, text: str) -> Knob:
    return Knob(option, ("0", "1"), default, text, "runtime")


def _build_catalog() -> Catalog:
    ort = _ort()
    levels = tuple(k for k, v in LEVELS.items() if hasattr(ort.GraphOptimizationLevel, v))
    knobs: list[Knob] = [
        Knob("-graph_optimization_level", levels, "all",
             "SessionOptions.graph_optimization_level: which graph transformers run before the optimized "
             "model is saved. disabled: none; basic: semantics-preserving rewrites (constant folding, "
             "redundant node removal, Conv+BN, MatMul+Add); extended: ORT contrib fusions (FusedConv, "
             "BiasGelu, FusedMatMul, Attention, SkipLayerNorm...); layout: adds layout optimizations "
             "(NCHWc on CPU); all: everything. Levels layout/all write hardware-specific NCHWc ops that "
             "reload fine on the same CPU.", "build"),
        Knob("-free_dimension_overrides", ("off", "on"), "off",
             "on: SessionOptions.add_free_dimension_override_by_name for every symbolic input dimension "
             "that the job's shape profile fixes (min == max), so the optimizer sees static shapes "
             "(enables MatMulAddFusion on rank-3 inputs, ReshapeFusion, more constant folding). The "
             "engine then accepts only those dimensions. No-op for dimensions the profile leaves "
             "dynamic. off: ORT's default, no overrides.", "build"),
        Knob("-enable_gelu_approximation", ("0", "1"), "0",
             "session config optimization.enable_gelu_approximation: 1 rewrites Gelu/BiasGelu into the "
             "tanh approximation FastGelu. Changes results slightly (about 1e-3), so the accuracy gate "
             "decides.", "build"),
    ]
    for name, (ort_names, what) in DISABLE.items():
        knobs.append(Knob(
            f"-disable:{name}", ("off", "on"), "off",
            f"on: pass {', '.join(ort_names)} in InferenceSession(disabled_optimizers=...) so this "
            f"transformer does not run. It does: {what}. No effect at levels that do not run it.", "build"))
    knobs += [
        Knob("-execution_mode", tuple(EXECUTION_MODES), "sequential",
             "SessionOptions.execution_mode: parallel runs independent branches of the graph concurrently "
             "on the inter-op thread pool; sequential runs nodes one at a time.", "runtime"),
        Knob("-execution_order", tuple(EXECUTION_ORDERS), "default",
             "SessionOptions.execution_order: the topological order nodes run in (default: ORT's order; "
             "priority_based: by node priority). memory_efficient is left out: it needs a training build.",
             "runtime"),
        Knob("-intra_op_num_threads", None, "0",
             "SessionOptions.intra_op_num_threads: threads used inside one operator (MLAS GEMM/Conv). "
             "0 lets ORT choose (one per physical core).", "runtime", minimum=0, maximum=4096),
        Knob("-inter_op_num_threads", None, "0",
             "SessionOptions.inter_op_num_threads: threads running independent nodes; only used with "
             "-execution_mode=parallel. 0 lets ORT choose.", "runtime", minimum=0, maximum=4096),
        _flag("-allow_spinning", "1",
              "session config session.intra_op.allow_spinning: 1 lets idle intra-op threads spin before "
              "blocking (lower latency, more CPU burned); 0 makes them block at once."),
        Knob("-dynamic_block_base", None, "0",
             "session config session.dynamic_block_base: with a positive value the thread pool splits "
             "parallel loops into shrinking blocks starting at N / (threads * base), which can cut latency "
             "variance; 0 keeps ORT's static partition.", "runtime", minimum=0, maximum=1 << 20),
        _flag("-disable_prepacking", "0",
              "session config session.disable_prepacking: 1 stops ORT from re-packing constant weights "
              "into kernel-friendly layouts when the session loads (less memory, usually slower GEMM/Conv)."),
        _flag("-enable_mem_pattern", "1",
              "SessionOptions.enable_mem_pattern: 1 plans one arena block for all intermediate tensors "
              "after the first run with a given input shape."),
        _flag("-enable_cpu_mem_arena", "1",
              "SessionOptions.enable_cpu_mem_arena: 1 serves CPU allocations from ORT's arena; 0 uses "
              "malloc/free directly."),
        _flag("-set_denormal_as_zero", "0",
              "session config session.set_denormal_as_zero: 1 sets flush-to-zero and denormals-are-zero in "
              "the session's threads (faster on denormal-heavy models, may change results)."),
    ]
    return Catalog(backend="onnxruntime", version=str(ort.__version__), knobs=tuple(knobs),
                   tuner_version=KNOBS_VERSION)


def _software(name: str) -> dict[str, str]:
    ort = _ort()
    try:
        from onnxruntime.capi import build_and_package_info

        package = str(build_and_package_info.package_name)
    except ImportError:
        package = "onnxruntime"
    return {"backend": name, "backend_version": str(ort.__version__), "package": package, "providers": PROVIDER}


def _probe(name: str) -> dict[str, Any]:
    """Import onnxruntime and read what the coordinator needs of it (``OnnxRuntimeBackend._installed``)."""
    try:
        ort = _ort()
    except ImportError as exc:
        return {"unavailable": f"onnxruntime cannot be imported: {exc}"}
    if PROVIDER not in ort.get_available_providers():
        return {"unavailable": f"this onnxruntime build has no {PROVIDER}"}
    return {"unavailable": None, "catalog": _build_catalog().to_record(), "software": _software(name)}


def _cast_feeds(feeds: Mapping[str, np.ndarray], types: Mapping[str, Any]) -> Feeds:
    import numpy as np

    out: Feeds = {}
    for name, value in feeds.items():
        dtype = types.get(name)
        arr = np.asarray(value)
        out[name] = np.ascontiguousarray(arr, dtype=dtype) if dtype is not None else arr
    return out


def free_dimension_overrides(model_path: str,
                             profile: Mapping[str, Mapping[str, list[int]]]) -> dict[str, int]:
    """Symbolic input dimensions that ``profile`` fixes (min == max everywhere they occur): name -> value.

    A dimension name seen with different or dynamic values in any input is left out, because ORT
    overrides a symbolic dimension by name for the whole graph."""
    import onnx

    model = onnx.load(model_path, load_external_data=False)
    values: dict[str, set[int | None]] = {}
    for inp in model.graph.input:
        dims = profile.get(inp.name)
        if dims is None or not inp.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(inp.type.tensor_type.shape.dim):
            if not dim.dim_param:
                continue
            lo, hi = dims["min"][axis], dims["max"][axis]
            values.setdefault(dim.dim_param, set()).add(lo if lo == hi else None)
    return {name: next(iter(v)) for name, v in sorted(values.items())  # type: ignore[misc]
            if len(v) == 1 and None not in v}


class OnnxRuntimeRunner:
    """A loaded ORT engine (the optimized model) with the route's runtime knobs applied."""

    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.input_types = {i.name: _NP_TYPES.get(i.type) for i in session.get_inputs()}
        self.output_names = [o.name for o in session.get_outputs()]

    def run(self, feeds: Feeds) -> Feeds:
        import numpy as np

        outputs = self.session.run(self.output_names, _cast_feeds(feeds, self.input_types))
        return dict(zip(self.output_names, (np.asarray(o) for o in outputs), strict=True))

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        prepared = _cast_feeds(feeds, self.input_types)
        names = self.output_names
        run = self.session.run
        return time_on_host(lambda f: run(names, f), prepared, warmup, iterations, repeats)


class OnnxRuntimeBackend(Backend):
    """ONNX Runtime on the CPU execution provider."""

    name: ClassVar[str] = "onnxruntime"
    engine_suffix: ClassVar[str] = ".onnx"
    install_hint: ClassVar[str] = "pip install onnxruntime"
    #: the optimized model is a pure function of model + route in structure, though not in bytes: the
    #: NchwcTransformer names the nodes it inserts from a counter, so frozen compares ``engine_identity``
    reproducible_engines: ClassVar[bool] = True
    #: sessions kept loaded side by side interfere: after a run, a session's intra-op threads spin and keep a
    #: core busy, so on a 2-core host the next session's two-thread runs took one thread's time in some turns
    #: (paired ratios of equal routes 0.5, 1 or 2); one session loaded per turn measured them at 1.00
    reload_each_turn: ClassVar[bool] = True

    def engine_identity(self, engine: Path) -> str | None:
        from trt_routes.backends.onnx_identity import model_identity

        return model_identity(engine)

    def __init__(self) -> None:
        self._install: dict[str, Any] | None = None
        self._catalog: Catalog | None = None
        self._references: dict[str, Any] = {}
        self._reference_lock = threading.Lock()

    # -- coordinator side -------------------------------------------------------------------
    def _installed(self) -> dict[str, Any]:
        """The installed ONNX Runtime's availability, catalog (``Catalog.to_record``) and software fields.

        Remembered (``trt_routes.files.memo``) under the install's identity (its files' sizes, mtimes and inodes)
        and the source of this module and of ``trt_routes.catalog``, so the coordinator need not import
        onnxruntime (~25 ms) to plan: another install or another knob mapping is probed anew, and only a
        usable install is remembered (a broken import may be mended outside its files)."""
        if self._install is None:
            identity = memo.package_identity("onnxruntime")
            key = {"install": identity, "code": memo.source_identity(__file__, catalog_module.__file__ or "")}
            found = memo.lookup("onnxruntime", key) if identity is not None else None
            if found is None:
                found = _probe(self.name)
                if identity is not None and found["unavailable"] is None:
                    memo.remember("onnxruntime", key, found)
            self._install = found
        return self._install

    def unavailable_reason(self) -> str | None:
        reason = self._installed()["unavailable"]
        return None if reason is None else str(reason)

    def catalog(self) -> Catalog:
        if self._catalog is None:
            record = self._installed().get("catalog")
            self._catalog = Catalog.from_record(record) if record is not None else _build_catalog()
        return self._catalog

    def software(self) -> dict[str, str]:
        software = self._installed().get("software")
        if software is None:  # not usable here: read from the import itself (which raises if it fails)
            return _software(self.name)
        return {str(k): str(v) for k, v in software.items()}

    def supports(self, target: Mapping[str, Any]) -> str | None:
        if target.get("kind") == "cpu":
            return None
        return "the onnxruntime backend tunes CPU targets; use backend onnxruntime-cuda for GPU targets"

    # -- route handling ---------------------------------------------------------------------
    def _route(self, route: Mapping[str, str]) -> dict[str, str]:
        """Every knob's value for ``route`` (defaults filled in); raises RouteError on a bad route."""
        catalog = self.catalog()
        values = {k.option: k.default for k in catalog.knobs}
        for option, value in route.items():
            knob = catalog.get(option)
            if knob is None:
                raise RouteError(f"unknown onnxruntime knob '{option}'",
                                 "run 'trt-routes knobs' to list them")
            if not knob.allows(value):
                raise RouteError(f"{option}={value} is not allowed", f"allowed: {knob.allowed_text()}")
            values[option] = value
        return values

    def _build_options(self, spec: BuildSpec,
                       values: Mapping[str, str]) -> tuple[Any, list[str], dict[str, int]]:
        ort = _ort()
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                              LEVELS[values["-graph_optimization_level"]])
        so.intra_op_num_threads = 1  # the graph does not depend on it; keeps builds light
        so.log_severity_level = 1  # info: ORT then names every transformer that modified the graph
        so.add_session_config_entry("optimization.enable_gelu_approximation",
                                    values["-enable_gelu_approximation"])
        overrides: dict[str, int] = {}
        if values["-free_dimension_overrides"] == "on":
            overrides = free_dimension_overrides(spec.model_path, spec.profile)
            for dim, size in overrides.items():
                so.add_free_dimension_override_by_name(dim, size)
        disabled = sorted({n for name, (ort_names, _) in DISABLE.items()
                           if values[f"-disable:{name}"] == "on" for n in ort_names})
        return so, disabled, overrides

    def _runtime_options(self, values: Mapping[str, str]) -> Any:
        ort = _ort()
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # run the engine as saved
        so.execution_mode = getattr(ort.ExecutionMode, EXECUTION_MODES[values["-execution_mode"]])
        so.execution_order = getattr(ort.ExecutionOrder, EXECUTION_ORDERS[values["-execution_order"]])
        # "0" means "ORT chooses" (one thread per core it sees); a worker bounded to fewer cores by the
        # executor (TRT_ROUTES_CPU_THREADS, see trt_routes.execute.pool) makes that choice explicit.
        bound = int(os.environ.get("TRT_ROUTES_CPU_THREADS", "0") or 0)
        so.intra_op_num_threads = int(values["-intra_op_num_threads"]) or bound
        so.inter_op_num_threads = int(values["-inter_op_num_threads"]) or bound
        so.enable_mem_pattern = values["-enable_mem_pattern"] == "1"
        so.enable_cpu_mem_arena = values["-enable_cpu_mem_arena"] == "1"
        so.add_session_config_entry("session.intra_op.allow_spinning", values["-allow_spinning"])
        so.add_session_config_entry("session.dynamic_block_base", values["-dynamic_block_base"])
        so.add_session_config_entry("session.disable_prepacking", values["-disable_prepacking"])
        so.add_session_config_entry("session.set_denormal_as_zero", values["-set_denormal_as_zero"])
        return so

    def serving(self, route: Mapping[str, str], settings: Mapping[str, Any], engine: str) -> dict[str, Any]:
        """The session options ``load`` applies for ``route`` (the engine is the optimized graph, so the
        build knobs are in its bytes, and the runtime knobs only here: engines of routes that differ in
        runtime knobs alone are byte-identical). Threads 0: ONNX Runtime's default, one per core."""
        values = self._route(route)
        options: dict[str, Any] = {
            "graph_optimization_level": "ORT_DISABLE_ALL",  # run the optimized graph as saved
            "execution_mode": EXECUTION_MODES[values["-execution_mode"]],
            "execution_order": EXECUTION_ORDERS[values["-execution_order"]],
            "intra_op_num_threads": int(values["-intra_op_num_threads"]),
            "inter_op_num_threads": int(values["-inter_op_num_threads"]),
            "enable_mem_pattern": values["-enable_mem_pattern"] == "1",
            "enable_cpu_mem_arena": values["-enable_cpu_mem_arena"] == "1",
        }
        config = {f"session.{key}": values[f"-{key.rsplit('.', 1)[-1]}"] for key in (
            "intra_op.allow_spinning", "dynamic_block_base", "disable_prepacking", "set_denormal_as_zero")}
        enums = {"graph_optimization_level": "GraphOptimizationLevel", "execution_mode": "ExecutionMode",
                 "execution_order": "ExecutionOrder"}
        lines = ["import onnxruntime as ort", "", "so = ort.SessionOptions()"]
        lines += [f"so.{k} = ort.{enums[k]}.{v}" if k in enums else f"so.{k} = {v!r}" for k, v in options.items()]
        lines += [f"so.add_session_config_entry({k!r}, {v!r})" for k, v in config.items()]
        lines.append(f"session = ort.InferenceSession({engine!r}, so, providers=[{PROVIDER!r}])")
        return {"session_options": options, "session_config": config, "providers": [PROVIDER],
                "provider_options": [{}], "python": "\n".join(lines) + "\n"}

    # -- worker side ------------------------------------------------------------------------
    def warm_up(self, spec: BuildSpec) -> None:
        """Import onnxruntime (~25 ms), which the reference run, every build and every load use. (onnx, which
        builds use for the graph summary, is left to the first build: a warm-up given while the coordinator
        plans has ~30 ms before the first task, and the reference run does not need onnx.)"""
        _ort()

    def build(self, spec: BuildSpec, engine_path: Path) -> str:
        """Optimize ``spec.model_path`` with the route's build knobs; the saved optimized model is the engine.

        Runtime knobs do not enter the engine (routes that differ only in them build identical bytes).
        Free dimension overrides are applied only with ``-free_dimension_overrides=on``."""
        ort = _ort()
        values = self._route(spec.route)
        so, disabled, overrides = self._build_options(spec, values)
        engine_path = Path(engine_path)
        engine_path.parent.mkdir(parents=True, exist_ok=True)
        engine_path.unlink(missing_ok=True)
        so.optimized_model_filepath = str(engine_path)
        error: Exception | None = None
        with captured_fd2() as lines:
            try:
                ort.InferenceSession(spec.model_path, so, providers=[PROVIDER],
                                     disabled_optimizers=disabled or None)
            except Exception as exc:
                error = exc
        log = summarize_log(lines)
        if error is not None:
            raise RuntimeError(f"onnxruntime could not optimize {spec.model_path}: {error}\n"
                               + "\n".join(log))
        if not engine_path.is_file() or engine_path.stat().st_size == 0:
            raise RuntimeError(f"onnxruntime wrote no optimized model to {engine_path}\n" + "\n".join(log))
        embedded = embed_external_data(engine_path, Path(spec.model_path).parent)
        build_knobs = {k: v for k, v in sorted(spec.route.items())
                       if (knob := self.catalog().get(k)) is not None and knob.phase == "build"}
        header = [
            f"onnxruntime {ort.__version__} {PROVIDER}",
            f"build knobs: {' '.join(f'{k}={v}' for k, v in build_knobs.items()) or '(defaults)'}",
            f"disabled_optimizers: {', '.join(disabled) or 'none'}",
            f"free dimension overrides: {', '.join(f'{k}={v}' for k, v in overrides.items()) or 'none'}",
            f"optimized graph: {op_counts(engine_path)}",
            *([f"external data embedded: {embedded} tensor(s)"] if embedded else []),
        ]
        return "\n".join([*header, *log]) + "\n"

    def load(self, engine_path: Path, spec: BuildSpec) -> Runner:
        ort = _ort()
        so = self._runtime_options(self._route(spec.route))
        session = ort.InferenceSession(str(engine_path), so, providers=[PROVIDER])
        return OnnxRuntimeRunner(session)

    def profile(self, engine_path: Path, spec: BuildSpec, feeds: Feeds) -> LayerProfile:
        from trt_routes.backends.ort_profile import profile_session

        options, ort = self._runtime_options(self._route(spec.route)), _ort()
        return profile_session(lambda so: ort.InferenceSession(str(engine_path), so, providers=[PROVIDER]), options,
                               feeds, backend=self.name, route=route_text(spec.route))

    def reference(self, spec: BuildSpec, feeds: Feeds) -> Feeds:
        """The original model at ``basic`` optimization (default session otherwise), one session per model."""
        runner = self._reference_runner(spec.model_path)
        return runner.run(feeds)

    def _reference_runner(self, model_path: str) -> OnnxRuntimeRunner:
        key = os.path.abspath(model_path)
        with self._reference_lock:
            runner = self._references.get(key)
            if runner is None:
                ort = _ort()
                so = ort.SessionOptions()
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
                runner = OnnxRuntimeRunner(ort.InferenceSession(key, so, providers=[PROVIDER]))
                self._references[key] = runner
            return runner  # type: ignore[no-any-return]
