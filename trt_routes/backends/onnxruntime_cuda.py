"""ONNX Runtime on NVIDIA GPUs through the CUDA execution provider: the backend ``onnxruntime-cuda``.

The engine is the model ORT loads on the GPU: the source graph (converted to float16 at ``-precision=fp16``,
graph inputs and outputs keeping their types) with ORT's ``basic`` rewrites (provider-independent) applied
and saved. The provider-specific work (the extended
fusions, the NHWC layout transform of ``-prefer_nhwc``, cuDNN's algorithm search, CUDA graph capture) runs
when a session is created on the GPU, so every other knob is applied where the engine is loaded, exactly as
a serving process must apply it (``lock show`` prints it). CPU fallback is disabled: a node the CUDA EP
cannot take fails the build, naming it. Runs are bound on the device (IO binding); timing waits for the GPU.
The reference is the parent's: the source model in float32 on the CPU provider, so TF32 and float16 routes
are judged against exact outputs."""

from __future__ import annotations

__all__ = ["CUDA_OPTIONS", "OnnxRuntimeCudaBackend", "to_float16"]

import contextlib
import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from trt_routes.backends.base import BuildSpec, Feeds
from trt_routes.backends.native_log import captured_fd2
from trt_routes.backends.onnxruntime import LEVELS, OnnxRuntimeBackend, _cast_feeds, _ort, route_text
from trt_routes.backends.ort_graph import embed_external_data, op_counts
from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import TrtRoutesError
from trt_routes.evidence.layers import LayerProfile

KNOBS_VERSION = "ort-cuda-knobs/1"
PROVIDER = "CUDAExecutionProvider"
FIX_BOTH = ("pip uninstall -y onnxruntime onnxruntime-gpu && pip install 'onnxruntime-gpu[cuda,cudnn]' "
            "(ONNX Runtime's advice: both packages install the module onnxruntime, and the one removed or "
            "installed last decides which files are left)")

#: CUDA EP provider options as knobs: option -> (values, default, what it does). The installed build's own
#: list (``InferenceSession.get_provider_options()``) filters them and gives their defaults where it runs.
CUDA_OPTIONS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "prefer_nhwc": (("0", "1"), "0",
                    "1: the layout transformer rewrites convolutions and their neighbours to NHWC kernels "
                    "(tensor-core friendly; adds Transposes at the boundaries)"),
    "enable_cuda_graph": (("0", "1"), "0",
                          "1: the first run is captured as a CUDA graph and replayed (less launch overhead; "
                          "inputs and outputs must stay at fixed device addresses, which the runner keeps)"),
    "cudnn_conv_algo_search": (("EXHAUSTIVE", "HEURISTIC", "DEFAULT"), "EXHAUSTIVE",
                               "how cuDNN convolution algorithms are chosen: EXHAUSTIVE benchmarks them, "
                               "HEURISTIC asks cuDNN's heuristics, DEFAULT takes the first (often slow)"),
    "use_tf32": (("1", "0"), "1",
                 "1: float32 matrix products and convolutions may use TF32 tensor cores (faster, ~1e-3 "
                 "relative error); 0: full float32"),
    "cudnn_conv_use_max_workspace": (("1", "0"), "1",
                                     "1: cuDNN may use as much workspace as it wants for convolutions"),
    "cudnn_conv1d_pad_to_nc1d": (("0", "1"), "0",
                                 "1: 1-D convolutions are padded as [N,C,1,D] rather than [N,C,D,1]"),
    "tunable_op_enable": (("0", "1"), "0", "1: TunableOp implementations are used where ORT has them"),
    "tunable_op_tuning_enable": (("0", "1"), "0",
                                 "1: TunableOp benchmarks its implementations at the first run (needs "
                                 "tunable_op_enable=1)"),
    "do_copy_in_default_stream": (("1", "0"), "1",
                                  "1: copies between host and device run on the default stream"),
    "enable_skip_layer_norm_strict_mode": (("0", "1"), "0",
                                           "1: SkipLayerNormalization accumulates in float32 (slower, more "
                                           "accurate in float16)"),
    "use_ep_level_unified_stream": (("0", "1"), "0", "1: the EP runs every kernel on one stream of its own"),
    "fuse_conv_bias": (("0", "1"), "0", "1: cuDNN frontend fuses a convolution with its bias add"),
}


def _knob_name(option: str) -> str:
    return f"-{option}"


def _catalog(installed: Mapping[str, str] | None, version: str) -> Catalog:
    """The static knobs, filtered by and defaulted from ``installed`` (the build's own provider options)."""
    knobs = [
        Knob("-precision", ("fp32", "fp16"), "fp32",
             "fp16: the model is converted to float16 before it is optimized (onnxruntime.transformers."
             "float16, graph inputs and outputs keep their types, ops ORT keeps in float32 stay there). "
             "Changes results: the tolerance decides, and a model whose outputs float16 underflows or "
             "overflows is refused by it.", "build"),
        Knob("-graph_optimization_level", tuple(LEVELS), "all",
             "SessionOptions.graph_optimization_level when the engine is loaded on the GPU: extended adds "
             "ORT's fused CUDA kernels (Attention, SkipLayerNorm, FusedConv...), layout the NHWC transform "
             "that -prefer_nhwc asks for.", "runtime"),
    ]
    for option, (values, default, text) in CUDA_OPTIONS.items():
        if installed is not None:
            if option not in installed:
                continue  # this build does not have it: a route naming it is an unknown knob
            default = installed[option] if installed[option] in values else default
        knobs.append(Knob(_knob_name(option), values, default,
                          f"CUDA EP provider option {option}: {text}.", "runtime"))
    return Catalog(backend="onnxruntime-cuda", version=version, knobs=tuple(knobs), tuner_version=KNOBS_VERSION)


def _loaded_versions() -> dict[str, str]:
    """The CUDA runtime and cuDNN versions this process has loaded (after a CUDA session exists), from the
    libraries' own calls; a library not loaded is absent."""
    import ctypes

    found: dict[str, str] = {}
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return found
    paths = {line.split()[-1] for line in maps.splitlines() if "/" in line}
    for path in sorted(paths):
        name = os.path.basename(path)
        try:
            if name.startswith("libcudart.so") and "cuda_runtime" not in found:
                value = ctypes.c_int()
                if ctypes.CDLL(path).cudaRuntimeGetVersion(ctypes.byref(value)) == 0:
                    found["cuda_runtime"] = f"{value.value // 1000}.{value.value % 1000 // 10}"
            elif name.startswith("libcudnn.so") and "cudnn" not in found:
                lib = ctypes.CDLL(path)
                lib.cudnnGetVersion.restype = ctypes.c_size_t
                v = int(lib.cudnnGetVersion())
                found["cudnn"] = f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
        except (OSError, AttributeError):
            continue
    return found


def _tiny_model() -> bytes:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnx writes its newest IR version, which an older onnxruntime refuses
    return bytes(model.SerializeToString())


def probe() -> dict[str, Any]:
    """What this machine's ONNX Runtime offers on the GPU: run in a child process (a CUDA context and the
    libraries it loads stay out of the coordinator). ``unavailable`` says why not, else the installed
    provider options, versions and the loaded CUDA runtime and cuDNN."""
    try:
        ort = _ort()
    except ImportError as exc:
        return {"unavailable": f"onnxruntime cannot be imported: {exc}"}
    from importlib import metadata

    dists = {d for d in ("onnxruntime", "onnxruntime-gpu") if _installed_dist(metadata, d)}
    _preload(ort)
    if PROVIDER not in ort.get_available_providers():
        why = f"this onnxruntime build ({ort.__version__}) has no {PROVIDER}"
        if dists == {"onnxruntime", "onnxruntime-gpu"}:
            why += f"; both onnxruntime and onnxruntime-gpu are installed: {FIX_BOTH}"
        return {"unavailable": why}
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    try:
        with captured_fd2() as lines:
            session = _session(ort, _tiny_model(), so, {})
    except Exception as exc:
        detail = " ".join(lines[-3:]) if "lines" in locals() else ""
        return {"unavailable": f"the CUDA execution provider cannot run here: {exc} {detail}".strip()}
    options = {str(k): str(v) for k, v in session.get_provider_options().get(PROVIDER, {}).items()}
    from onnxruntime.capi import build_and_package_info as info

    software = {"backend": "onnxruntime-cuda", "backend_version": str(ort.__version__),
                "package": str(getattr(info, "package_name", "onnxruntime")), "providers": PROVIDER,
                "cuda_build": str(getattr(info, "cuda_version", "")), **_loaded_versions()}
    return {"unavailable": None, "provider_options": options, "software": software}


def _installed_dist(metadata: Any, name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def to_float16(source: str, destination: Path) -> Path:
    """``source`` with its float32 weights and ops in float16 (graph inputs and outputs keep their types:
    ONNX Runtime's own converter, ``keep_io_types``), written to ``destination``."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(source)
    converted = convert_float_to_float16(model, keep_io_types=True)
    destination.parent.mkdir(parents=True, exist_ok=True)
    large = converted.ByteSize() >= 2**31 - 2**20
    onnx.save(converted, str(destination), save_as_external_data=large,
              location=destination.name + ".data" if large else None)
    return destination


class CudaRunner:
    """A session on the CUDA EP run through IO binding: inputs copied to the device once per feed, outputs
    bound on the device (pre-allocated where a CUDA graph needs fixed addresses); each timed iteration
    ends when the GPU has finished (``synchronize_outputs``), and timing holds the GPU's lock."""

    def __init__(self, session: Any, device_id: int, cuda_graph: bool, engine: str, options: dict[str, str],
                 session_options: Any) -> None:
        self.session = session
        self.session_options = session_options
        self.device_id = device_id
        self.cuda_graph = cuda_graph
        self.engine = engine
        self.options = options
        self.input_types = {i.name: _np_type(i.type) for i in session.get_inputs()}
        self.output_names = [o.name for o in session.get_outputs()]
        self._bound: tuple[Any, dict[str, Any], dict[str, Any], tuple[Any, ...]] | None = None

    def _output_shapes(self, feeds: Feeds) -> dict[str, tuple[tuple[int, ...], Any]]:
        """Output shapes and dtypes for ``feeds``, from one run of the engine without a CUDA graph (a
        graph-captured session needs its outputs allocated before its first run)."""
        ort = _ort()
        plain = {**self.options, "enable_cuda_graph": "0"}
        session = _session(ort, self.engine, self.session_options, plain)  # the same graph as the timed one
        outputs = session.run(self.output_names, feeds)
        return {n: (tuple(o.shape), o.dtype) for n, o in zip(self.output_names, outputs, strict=True)}

    def _binding(self, feeds: Feeds) -> Any:
        import numpy as np

        ort = _ort()
        prepared = _cast_feeds(feeds, self.input_types)
        key = tuple((n, a.shape, a.dtype.str) for n, a in sorted(prepared.items()))
        if self._bound is not None and self._bound[3] == key:
            binding, inputs, _outputs, _ = self._bound
            for name, array in prepared.items():
                inputs[name].update_inplace(array)  # same addresses: a captured graph stays valid
            return binding
        binding = self.session.io_binding()
        inputs = {n: ort.OrtValue.ortvalue_from_numpy(a, "cuda", self.device_id) for n, a in prepared.items()}
        for name, value in inputs.items():
            binding.bind_ortvalue_input(name, value)
        outputs: dict[str, Any] = {}
        if self.cuda_graph:
            for name, (shape, dtype) in self._output_shapes(prepared).items():
                outputs[name] = ort.OrtValue.ortvalue_from_shape_and_type(shape, np.dtype(dtype), "cuda",
                                                                          self.device_id)
                binding.bind_ortvalue_output(name, outputs[name])
        else:
            for name in self.output_names:
                binding.bind_output(name, "cuda", self.device_id)
        self._bound = (binding, inputs, outputs, key)
        return binding

    def run(self, feeds: Feeds) -> Feeds:
        import numpy as np

        binding = self._binding(feeds)
        self.session.run_with_iobinding(binding)
        values = binding.copy_outputs_to_cpu()
        return {n: np.asarray(v) for n, v in zip(self.output_names, values, strict=True)}

    def time(self, feeds: Feeds, warmup: int, iterations: int, repeats: int) -> list[float]:
        from trt_routes.backends.cuda_device import gpu_lock

        binding = self._binding(feeds)
        run = self.session.run_with_iobinding
        sync = binding.synchronize_outputs
        with gpu_lock(self.device_id):
            for _ in range(warmup):
                run(binding)
                sync()
            samples: list[float] = []
            for _ in range(repeats * iterations):
                t0 = time.perf_counter()
                run(binding)
                sync()
                samples.append((time.perf_counter() - t0) * 1e3)
        return samples


def _np_type(ort_type: str) -> str | None:
    from trt_routes.backends.onnxruntime import _NP_TYPES

    return _NP_TYPES.get(ort_type)


class OnnxRuntimeCudaBackend(OnnxRuntimeBackend):
    """ONNX Runtime on the CUDA execution provider (GPU targets)."""

    name: ClassVar[str] = "onnxruntime-cuda"
    install_hint: ClassVar[str] = f"pip install 'trt-routes[cuda]', then {FIX_BOTH}"
    reproducible_engines: ClassVar[bool] = True
    reload_each_turn: ClassVar[bool] = False

    def _installed(self) -> dict[str, Any]:
        """``probe()`` in a child process, remembered like the parent's under the install's identity."""
        if self._install is None:
            from trt_routes import catalog as catalog_module
            from trt_routes.files import memo

            identity = memo.package_identity("onnxruntime")
            key = {"install": identity, "code": memo.source_identity(__file__, catalog_module.__file__ or "")}
            found = memo.lookup(self.name, key) if identity is not None else None
            if found is None:
                found = _probe_in_child()
                if identity is not None and found.get("unavailable") is None:
                    memo.remember(self.name, key, found)
            self._install = found
        return self._install

    def catalog(self) -> Catalog:
        if self._catalog is None:
            installed = self._installed()
            version = str(installed.get("software", {}).get("backend_version", "")) or _ort_version()
            self._catalog = _catalog(installed.get("provider_options"), version)
        return self._catalog

    def software(self) -> dict[str, str]:
        software = self._installed().get("software")
        if software is None:
            return {"backend": self.name, "backend_version": _ort_version(), "providers": PROVIDER}
        return {str(k): str(v) for k, v in software.items()}

    def supports(self, target: Mapping[str, Any]) -> str | None:
        if target.get("kind") == "gpu":
            return None
        return "the onnxruntime-cuda backend tunes GPU targets; use backend onnxruntime for CPU targets"

    # -- route handling ---------------------------------------------------------------------
    def _provider_options(self, values: Mapping[str, str]) -> dict[str, str]:
        return {o: values[_knob_name(o)] for o in CUDA_OPTIONS if _knob_name(o) in values}

    def _session_options(self, values: Mapping[str, str], *, fallback: bool = False) -> Any:
        ort = _ort()
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                              LEVELS[values["-graph_optimization_level"]])
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "0" if fallback else "1")
        return so

    def serving(self, route: Mapping[str, str], settings: Mapping[str, Any], engine: str) -> dict[str, Any]:
        values = self._route(route)
        level = LEVELS[values["-graph_optimization_level"]]
        provider = self._provider_options(values)
        config = {"session.disable_cpu_ep_fallback": "1"}
        lines = ["import onnxruntime as ort", "", "ort.preload_dlls()  # CUDA and cuDNN from the nvidia-* wheels",
                 "so = ort.SessionOptions()", f"so.graph_optimization_level = ort.GraphOptimizationLevel.{level}",
                 *(f"so.add_session_config_entry({k!r}, {v!r})" for k, v in config.items()),
                 f"session = ort.InferenceSession({engine!r}, so, providers=[({PROVIDER!r}, {provider!r})],",
                 "                               enable_fallback=0)  # an error, never a silent retry on the CPU",
                 *(["# enable_cuda_graph: run through session.io_binding() with inputs and outputs at fixed "
                    "device addresses"] if provider.get("enable_cuda_graph") == "1" else [])]
        return {"session_options": {"graph_optimization_level": level}, "session_config": config,
                "providers": [PROVIDER], "provider_options": [provider], "python": "\n".join(lines) + "\n"}

    # -- worker side ------------------------------------------------------------------------
    def warm_up(self, spec: BuildSpec) -> None:
        _cuda_ort()

    def build(self, spec: BuildSpec, engine_path: Path) -> str:
        """The (float16) model at ``basic`` as the engine, then a session on the GPU with every knob of the
        route and CPU fallback disabled: a node the CUDA EP cannot take fails the build here, named."""
        ort = _cuda_ort()
        values = self._route(spec.route)
        engine_path = Path(engine_path)
        engine_path.parent.mkdir(parents=True, exist_ok=True)
        engine_path.unlink(missing_ok=True)
        source = spec.model_path
        if values["-precision"] == "fp16":
            work = Path(spec.work_dir or engine_path.parent)
            source = str(to_float16(spec.model_path, work / "model.fp16.onnx"))
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(engine_path)
        with captured_fd2() as lines:  # on the GPU: the CPU provider lacks most float16 kernels
            try:
                _session(ort, source, so, {"device_id": str(_device_id(spec))})
            except Exception as exc:
                raise RuntimeError(f"onnxruntime could not optimize {source}: {exc}") from None
        if not engine_path.is_file() or engine_path.stat().st_size == 0:
            raise RuntimeError(f"onnxruntime wrote no optimized model to {engine_path}\n" + "\n".join(lines))

        embedded = embed_external_data(engine_path, Path(source).parent)
        placement = self._check_placement(str(engine_path), values)
        knobs = " ".join(f"{k}={v}" for k, v in sorted(spec.route.items())) or "(defaults)"
        return "\n".join([
            f"onnxruntime {ort.__version__} {PROVIDER}", f"route: {knobs}",
            f"provider options: {json.dumps(self._provider_options(values), sort_keys=True)}",
            f"engine graph (basic): {op_counts(engine_path)}",
            *([f"external data embedded: {embedded} tensor(s)"] if embedded else []), placement]) + "\n"

    def _check_placement(self, engine: str, values: Mapping[str, str]) -> str:
        ort = _ort()
        so = self._session_options(values)
        try:
            with captured_fd2():
                _session(ort, engine, so, self._provider_options(values))
        except Exception as exc:
            raise RuntimeError(f"the CUDA execution provider does not take the whole graph with this route "
                               f"(CPU fallback is disabled): {exc}\n{self._cpu_nodes(engine, values)}") from None
        return "placement: every node on CUDAExecutionProvider (CPU fallback disabled)"

    def _cpu_nodes(self, engine: str, values: Mapping[str, str]) -> str:
        """The nodes ORT places on the CPU when fallback is allowed (its verbose placement log)."""
        ort = _ort()
        so = self._session_options(values, fallback=True)
        so.log_severity_level = 0
        with captured_fd2() as lines:
            try:
                _session(ort, engine, so, self._provider_options(values))
            except Exception as exc:
                return f"(and with fallback allowed it fails too: {exc})"
        start = next((i for i, line in enumerate(lines) if "placed on [CPUExecutionProvider]" in line), None)
        if start is None:
            return "(ORT's log names no CPU node)"
        nodes = []
        for line in lines[start + 1:]:  # "... VerifyEachNodeIsAssignedToAnEp]  Unique (the_unique_node)"
            text = line.split("] ", 1)[-1].strip() if "VerifyEachNodeIsAssignedToAnEp]" in line else ""
            if not text or "placed on [" in text:
                break
            nodes.append(text)
        return "on the CPU provider when fallback is allowed: " + (", ".join(nodes[:20]) or "(not named)")

    def load(self, engine_path: Path, spec: BuildSpec) -> CudaRunner:
        ort = _cuda_ort()
        values = self._route(spec.route)
        options = self._provider_options(values)
        device_id = _device_id(spec)
        options_with_device = {**options, "device_id": str(device_id)}
        so = self._session_options(values)
        session = _session(ort, str(engine_path), so, options_with_device)
        return CudaRunner(session, device_id, options.get("enable_cuda_graph") == "1", str(engine_path),
                          options_with_device, so)

    def profile(self, engine_path: Path, spec: BuildSpec, feeds: Feeds) -> LayerProfile:
        """ORT's profiler with the route's options, CUDA graph capture off (a replayed graph records no node):
        each node's time is the host's launch time, which the sums check in explain says."""
        from trt_routes.backends.ort_profile import profile_session

        ort, values = _cuda_ort(), self._route(spec.route)
        options = {**self._provider_options(values), "device_id": str(_device_id(spec)), "enable_cuda_graph": "0"}
        profile = profile_session(
            lambda so: _session(ort, str(engine_path), so, options),
            self._session_options(values), feeds, backend=self.name, route=route_text(spec.route))
        return dataclasses.replace(profile, note="node times are host launch times on the CUDA provider"
                                   + ("; CUDA graph off while profiled" if values.get("-enable_cuda_graph") == "1"
                                      else ""))

    def reference_version(self) -> str:
        """Same reference as the CPU backend (the source model in float32 on the CPU provider)."""
        return f"onnxruntime:{self.software().get('backend_version', '')}"


def _ort_version() -> str:
    try:
        return str(_ort().__version__)
    except ImportError:
        return "absent"


def _session(ort: Any, model: str | bytes, so: Any, options: Mapping[str, str]) -> Any:
    """A session on the CUDA provider alone. Without ``enable_fallback=0`` onnxruntime's Python API retries a
    session that fails to start, or a run that fails on the provider, on the CPU provider, and only prints so:
    a CPU session's times, outputs or optimized graph would be taken for the CUDA provider's. Seen on the H200
    (``bench/RESULTS.md``, gpu_search.py): a cuDNN failure in a float16 run, retried on the CPU."""
    return ort.InferenceSession(model, so, providers=[(PROVIDER, dict(options))], enable_fallback=0)


def _cuda_ort() -> Any:
    """onnxruntime with the CUDA and cuDNN libraries of the nvidia-* wheels loaded (``preload_dlls``)."""
    ort = _ort()
    _preload(ort)
    if PROVIDER not in ort.get_available_providers():
        raise TrtRoutesError(f"this onnxruntime build ({ort.__version__}) has no {PROVIDER}",
                             OnnxRuntimeCudaBackend.install_hint)
    return ort


@functools.cache
def _preload(ort: Any) -> None:
    """``onnxruntime.preload_dlls()`` once (ORT >= 1.21): CUDA and cuDNN from the nvidia-* wheels (torch's
    too). Where it fails, libraries found the usual way (LD_LIBRARY_PATH) still load."""
    if hasattr(ort, "preload_dlls"):
        with captured_fd2(), contextlib.suppress(Exception):
            ort.preload_dlls()


def _device_id(spec: BuildSpec) -> int:
    """The CUDA device (as this process sees it) whose name the job's target matched; 0 by default."""
    wanted = (spec.target.get("device") or {}).get("gpu_name")
    if wanted:
        from trt_routes.backends.cuda_device import gpu_fields

        for index, fields in enumerate(gpu_fields()):
            if fields.get("gpu_name") == wanted:
                return index
    return 0


def _probe_in_child() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "trt_routes.backends.onnxruntime_cuda"], capture_output=True,
                          text=True, timeout=120, check=False)
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"unavailable": f"probing onnxruntime's CUDA provider failed (exit {done.returncode}): {tail}"}
    return found if isinstance(found, dict) else {"unavailable": "probing onnxruntime's CUDA provider failed"}


if __name__ == "__main__":
    print(json.dumps(probe()))
