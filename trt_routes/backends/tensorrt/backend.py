"""The TensorRT backend: catalog from ``all_build_routes``, builds with a validated build route,
engines run through cuda-python, references from ONNX Runtime. ``tensorrt`` is imported lazily."""

from __future__ import annotations

import importlib
import math
import os
import warnings
from collections.abc import Collection, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from trt_routes.backends.base import Backend, BuildSpec, Feeds
from trt_routes.backends.cuda_device import gpu_fields
from trt_routes.backends.tensorrt.catalog import (
    CatalogFormatError,
    read_catalog,
    readback_differences,
    validate_route,
)
from trt_routes.backends.tensorrt.process import distribution, process_runtime, process_state
from trt_routes.backends.tensorrt.runner import TensorRTRunError, TensorRTRunner
from trt_routes.backends.tensorrt.settings import NOT_BUILD, apply_settings, check_settings, setting_value
from trt_routes.backends.tensorrt.timing_cache import (
    TimingCacheFile,
    atomic_write,
    host_bytes,
    timing_cache_path,
)
from trt_routes.backends.tensorrt.trt_logger import process_logger
from trt_routes.catalog import Catalog
from trt_routes.errors import BackendUnavailable, TrtRoutesError
from trt_routes.evidence.layers import LayerProfile

MIN_VERSION = (11, 1)
UNAVAILABLE = "TensorRT Global Performance Tuner unavailable"


class TensorRTBuildError(TrtRoutesError):
    """A build failed; ``log`` holds everything TensorRT said before it did."""

    def __init__(self, message: str, log: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.log = log


def version_tuple(version: str) -> tuple[int, ...]:
    """Leading integers of a version string: "11.1.0.106" -> (11, 1, 0, 106)."""
    out: list[int] = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits or not part.startswith(digits):
            break
        out.append(int(digits))
    return tuple(out)


def _gpu_identity(target: Mapping[str, Any]) -> str:
    """Name and compute capability of the GPU a spec targets (the matched device when known)."""
    for source in (target, target.get("device"), target.get("hardware")):
        if isinstance(source, Mapping) and source.get("gpu_name"):
            return f"{source['gpu_name']} sm{source.get('compute_capability', '')}"
    gpus = gpu_fields()
    if gpus:
        return f"{gpus[0]['gpu_name']} sm{gpus[0]['compute_capability']}"
    return "unknown-gpu"


def timing_cache_dir(spec: BuildSpec, settings: Mapping[str, Any]) -> Path:
    """Folder of the shared timing caches: the ``timing_cache_dir`` setting, else
    $TRT_ROUTES_TIMING_CACHE_DIR, else the parent of ``spec.work_dir``, else
    ``$XDG_CACHE_HOME/trt-routes/tensorrt`` (never a trial's scratch folder, which the worker deletes)."""
    folder = settings.get("timing_cache_dir") or os.environ.get("TRT_ROUTES_TIMING_CACHE_DIR")
    if folder:
        return Path(folder)
    if spec.work_dir:
        return Path(spec.work_dir).parent
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "trt-routes" / "tensorrt"


class TensorRTBackend(Backend):
    """NVIDIA TensorRT 11.1+ and its Global Performance Tuner knobs."""

    name: ClassVar[str] = "tensorrt"
    engine_suffix: ClassVar[str] = ".engine"
    install_hint: ClassVar[str] = "pip install 'trt-routes[tensorrt]' (TensorRT 11.1+ with an NVIDIA GPU)"

    def __init__(self) -> None:
        self._catalog: Catalog | None = None
        self._software: dict[str, str] | None = None
        #: catalog entries TensorRT listed that could not be used, with the reason (also in each build log)
        self.catalog_skipped: tuple[str, ...] = ()

    # -- probing ----------------------------------------------------------------------------
    def _import(self) -> ModuleType:
        try:
            return importlib.import_module("tensorrt")
        except Exception as exc:  # the index's stub wheel raises more than ImportError
            raise BackendUnavailable(
                f"{UNAVAILABLE}: tensorrt does not import ({exc})", self.install_hint
            ) from exc

    @staticmethod
    def _version_problem(trt: ModuleType) -> str | None:
        version = str(getattr(trt, "__version__", ""))
        parsed = version_tuple(version)
        if len(parsed) < 2:
            return f"{UNAVAILABLE}: cannot read the tensorrt version ({version!r})"
        if parsed[:2] < MIN_VERSION:
            return f"{UNAVAILABLE}: TensorRT {version} is older than 11.1"
        if not hasattr(trt.IBuilderConfig, "all_build_routes"):
            return f"{UNAVAILABLE}: IBuilderConfig has no all_build_routes in TensorRT {version}"
        return None

    def _catalog_text(self, trt: ModuleType, builder: Any = None) -> str:
        """``all_build_routes``, read once per process: from ``builder`` when given (a build's own),
        else from a Builder made for it. BackendUnavailable when TensorRT cannot make a Builder."""
        state = process_state(trt)
        if state.catalog_text is None:
            if builder is None:
                logger = process_logger(trt)
                with logger.capture() as log:
                    try:
                        builder = trt.Builder(logger)
                    except TypeError as exc:  # pybind11: "factory function returned nullptr"
                        raise BackendUnavailable(
                            f"{UNAVAILABLE}: {_no_object('Builder', exc, log.errors())}", self.install_hint
                        ) from exc
            text = builder.create_builder_config().all_build_routes
            state.catalog_text = text if isinstance(text, str) else ""
        return state.catalog_text

    def _catalog_problem(self, trt: ModuleType, builder: Any = None) -> str | None:
        """Read and parse the catalog (once); the reason the backend is unavailable, or None."""
        if self._catalog is not None:
            return None
        version = str(trt.__version__)
        try:
            text = self._catalog_text(trt, builder)
        except BackendUnavailable as exc:
            return exc.message
        except Exception as exc:  # CUDA initialisation failures surface here
            return f"{UNAVAILABLE}: creating a TensorRT builder failed ({type(exc).__name__}: {exc})"
        if not text.strip():
            return (
                f"{UNAVAILABLE}: all_build_routes is empty in TensorRT {version} "
                "(Windows, TensorRT-RTX and the lean/dispatch runtimes have no tuner)"
            )
        try:
            reading = read_catalog(text, version=version)
        except CatalogFormatError as exc:
            return f"{UNAVAILABLE}: {exc.message}"
        if reading.skipped:
            warnings.warn(
                CatalogEntrySkipped(
                    f"TensorRT {version}: {len(reading.skipped)} build-route catalog entr"
                    f"{'y' if len(reading.skipped) == 1 else 'ies'} skipped: " + "; ".join(reading.skipped)
                ),
                stacklevel=3,
            )
        self._catalog, self.catalog_skipped = reading.catalog, reading.skipped
        return None

    def unavailable_reason(self) -> str | None:
        try:
            trt = self._import()
        except BackendUnavailable as exc:
            return exc.message
        return self._version_problem(trt) or self._catalog_problem(trt)

    def _require(self) -> ModuleType:
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(reason, self.install_hint)
        return self._import()

    # -- coordinator side -------------------------------------------------------------------
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._require()
        assert self._catalog is not None
        return self._catalog

    def software(self) -> dict[str, str]:
        """Signature fields. ``backend_distribution`` tells cu12 from cu13 builds (same ``__version__``);
        ``tensorrt_cuda`` is the CUDA TensorRT was built for, not cuda-python's (which only moves data)."""
        if self._software is None:
            trt = self._require()
            catalog = self.catalog()
            found = distribution(trt)
            self._software = {
                "backend": self.name,
                "backend_version": str(trt.__version__),
                "backend_distribution": found.text,
                "tensorrt_cuda": found.cuda,
                "tuner_version": catalog.tuner_version or "unknown",
                "catalog_digest": catalog.digest,
            }
        return dict(self._software)

    def supports(self, target: Mapping[str, Any]) -> str | None:
        if target.get("kind") != "gpu":
            return "TensorRT builds engines for NVIDIA GPUs only; use a target of kind 'gpu'"
        return None

    # -- worker side ------------------------------------------------------------------------
    def build(self, spec: BuildSpec, engine_path: Path) -> str:
        trt = self._import()
        problem = self._version_problem(trt)
        if problem:
            raise BackendUnavailable(problem, self.install_hint)
        settings = check_settings(spec.settings)
        logger = process_logger(trt)
        lines: list[str] = [f"TensorRT {trt.__version__} ({distribution(trt).text})"]
        with logger.capture() as log:

            def fail(message: str, hint: str | None = None) -> TensorRTBuildError:
                errors = log.errors()
                detail = (message + "\n  TensorRT errors:\n    " + "\n    ".join(errors)) if errors else message
                return TensorRTBuildError(detail, "\n".join([*lines, log.text()]), hint)

            try:
                try:
                    builder = trt.Builder(logger)
                except TypeError as exc:  # pybind11: "factory function returned nullptr"
                    raise fail(_no_object("Builder", exc, []), "is a GPU visible to this worker?") from exc
                reason = self._catalog_problem(trt, builder)  # the build's own Builder reads the catalog
                if reason:
                    raise BackendUnavailable(reason, self.install_hint)
                catalog = self.catalog()
                lines += [f"catalog: {skipped}" for skipped in self.catalog_skipped]
                route = validate_route(spec.route, catalog)
                lines.append(f"route: {route or '(default)'}")
                network = builder.create_network(0)
                parser = trt.OnnxParser(network, logger)
                model = Path(spec.model_path)
                # from the file, so that external data (model.onnx.data...) resolves next to it
                if not parser.parse_from_file(str(model)) or parser.num_errors:
                    raise fail(f"ONNX parser rejected {model.name}: " + "; ".join(_parser_errors(parser)))
                config = builder.create_builder_config()
                shape_tensors = {n for n, given in spec.inputs.items() if given.get("shape_tensor")}
                lines += _add_profile(builder, network, config, spec.profile, fail, shape_tensors)
                lines += apply_settings(trt, config, settings)
                config.build_route = route
                readback = str(config.build_route or "")
                diffs = readback_differences(spec.route, readback, catalog)
                if diffs:
                    raise fail(
                        f"TensorRT did not keep the route: {'; '.join(diffs)} (read back: {readback!r})",
                        "a knob may be overridden in this TensorRT version; check `trt-routes knobs`",
                    )
                lines.append(f"build_route read back: {readback or '(default)'}")
                cache = self._timing_cache(trt, spec, settings, route)
                if cache is None:
                    lines.append("timing cache: fresh for this build (timing_cache: fresh)")
                else:
                    lines += cache.load_into(config)
                serialized = builder.build_serialized_network(network, config)
                if serialized is None:
                    raise fail("build_serialized_network returned None")
                atomic_write(engine_path, host_bytes(serialized))
                if cache is not None:
                    lines += cache.save_from(config)
            except TrtRoutesError:
                raise
            except Exception as exc:  # TensorRT raises RuntimeError/TypeError from its bindings
                raise fail(f"TensorRT build failed: {type(exc).__name__}: {exc}") from exc
            return "\n".join([*lines, log.text()])

    @staticmethod
    def _timing_cache(
        trt: ModuleType, spec: BuildSpec, settings: Mapping[str, Any], route: str
    ) -> TimingCacheFile | None:
        """The timing-cache file of this build, or None for a fresh cache (``timing_cache: fresh``)."""
        if setting_value(settings, "timing_cache") == "fresh":
            return None
        found = distribution(trt)
        build = f"{trt.__version__} {found.name}" if found.name != "unknown" else str(trt.__version__)
        builder_settings = {k: v for k, v in settings.items() if k not in NOT_BUILD}
        return TimingCacheFile(
            timing_cache_path(
                timing_cache_dir(spec, settings), build, _gpu_identity(spec.target), builder_settings, route
            )
        )

    def load(self, engine_path: Path, spec: BuildSpec) -> TensorRTRunner:
        trt = self._import()
        settings = check_settings(spec.settings)
        logger = process_logger(trt)
        with logger.capture() as log:
            try:
                runtime = process_runtime(trt, logger)
            except TypeError as exc:  # pybind11: "factory function returned nullptr"
                raise TensorRTRunError(
                    _no_object("Runtime", exc, log.errors()), "is a GPU visible to this worker?"
                ) from exc
            # A version-compatible engine embeds its lean runtime: host code the Runtime refuses unless
            # allowed (trtexec's sampleEngines.cpp does the same for --versionCompatible).
            runtime.engine_host_code_allowed = bool(setting_value(settings, "version_compatible"))
            engine = runtime.deserialize_cuda_engine(Path(engine_path).read_bytes())
            if engine is None:
                errors = "; ".join(log.errors()) or "no message"
                raise TensorRTRunError(
                    f"cannot deserialize engine {engine_path}: {errors}",
                    "engines run only on the TensorRT version and GPU that built them",
                )
        return TensorRTRunner(
            trt, runtime, engine, logger, spec.opt_shapes, cuda_graph=bool(setting_value(settings, "cuda_graph"))
        )

    def profile(self, engine_path: Path, spec: BuildSpec, feeds: Feeds) -> LayerProfile:
        """Each layer's time from TensorRT's own profiler (``tensorrt.profile``), on a runner loaded for it."""
        from trt_routes.backends.tensorrt.profile import profile_runner

        return profile_runner(self._import(), self.load(engine_path, spec), feeds,
                              route=" ".join(f"{k}={v}" for k, v in sorted(spec.route.items())))

    def reference(self, spec: BuildSpec, feeds: Feeds) -> Feeds:
        """Reference outputs from ONNX Runtime on the CPU at basic graph optimization.

        TensorRT has no plain float32 path of its own: every build picks tactics (and TF32 or fused
        kernels where it may), so even its lowest optimization level is not a reference. ONNX Runtime's
        CPU provider at ORT_ENABLE_BASIC only folds constants and removes redundant nodes."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        session = ort.InferenceSession(spec.model_path, options, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in session.get_inputs()}
        names = [o.name for o in session.get_outputs()]
        outputs = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
        return dict(zip(names, outputs, strict=True))

    def reference_version(self) -> str:
        import onnxruntime as ort

        return f"onnxruntime:{ort.__version__}:basic:cpu"


class CatalogEntrySkipped(UserWarning):
    """TensorRT's build-route catalog listed an entry trt-routes cannot use; the rest of it is used."""


def _no_object(kind: str, exc: BaseException, errors: list[str]) -> str:
    """The message for ``trt.Builder``/``trt.Runtime`` raising TypeError: TensorRT's factory returned NULL."""
    said = f"; TensorRT said: {'; '.join(errors)}" if errors else ""
    return (
        f"tensorrt.{kind} could not be created: TensorRT returned no {kind.lower()} ({exc}){said} "
        "(no usable GPU, a driver too old for this TensorRT, or CUDA failed to initialise)"
    )


def _parser_errors(parser: Any) -> list[str]:
    """Every error the ONNX parser recorded, with the node it points at."""
    return [_parser_error_text(parser.get_error(i)) for i in range(parser.num_errors)] or ["no error recorded"]


def _parser_error_text(parser_error: Any) -> str:
    """One ``ParserError`` in words: its description, and the node's index, name and operator where known."""
    where = []
    node = int(parser_error.node())
    if node >= 0:
        where.append(f"node {node}")
    name, operator = str(parser_error.node_name()), str(parser_error.node_operator())
    if name:
        where.append(f"name {name}")
    if operator:
        where.append(f"operator {operator}")
    return str(parser_error.desc()) + (f" ({', '.join(where)})" if where else "")


def _add_profile(
    builder: Any, network: Any, config: Any, profile: Mapping[str, Mapping[str, list[int]]], fail: Any,
    shape_tensors: Collection[str] = (),
) -> list[str]:
    """One optimization profile from ``profile`` ({input: {min, opt, max}}), checked against the network. For a
    shape tensor (declared ``shape_tensor`` in the manifest, and read as one by TensorRT) the entry holds its
    values: ``set_shape_input``, not ``set_shape``."""
    inputs: dict[str, tuple[int, ...]] = {}
    values: dict[str, tuple[int, ...]] = {}  # shape tensors: their own (static) shapes
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        own = tuple(int(d) for d in tensor.shape)
        if bool(tensor.is_shape_tensor) != (tensor.name in shape_tensors):
            read = "reads it as a shape tensor (its values are a shape)" if tensor.is_shape_tensor else \
                "reads it as a data tensor"
            raise fail(f"input {tensor.name}: TensorRT {read}, the manifest says shape_tensor: "
                       f"{str(tensor.name in shape_tensors).lower()}",
                       f"write shape_tensor: {str(bool(tensor.is_shape_tensor)).lower()} under the model's "
                       f"inputs: {tensor.name} (a shape tensor's profile entries give its values, as trtexec's "
                       "--shapes does)")
        (values if tensor.is_shape_tensor else inputs)[tensor.name] = own
    unknown = sorted(set(profile) - set(inputs) - set(values))
    if unknown:
        raise fail(
            f"shape profile names inputs the model does not have: {unknown}; model inputs: {sorted(inputs)}"
        )
    uncovered = sorted(n for n, dims in inputs.items() if any(d < 0 for d in dims) and n not in profile)
    if uncovered:
        raise fail(f"dynamic inputs without shapes in the profile: {uncovered}")
    unset = sorted(n for n in values if n not in profile)
    if unset:
        raise fail(f"shape tensors without values in the profile: {unset}")
    if not profile:
        return []
    opt_profile = builder.create_optimization_profile()
    lines = []
    for name in sorted(profile):
        dims = profile[name]
        opt = list(dims["opt"])
        lo, hi = list(dims.get("min", opt)), list(dims.get("max", opt))
        if name in values:  # a shape tensor: the entry holds its values, one per element
            count = math.prod(values[name])
            if any(len(p) != count for p in (lo, opt, hi)):
                raise fail(f"shape tensor {name} of shape {list(values[name])} takes {count} value(s), the profile "
                           f"gives {len(lo)}/{len(opt)}/{len(hi)} (min/opt/max)")
            try:
                opt_profile.set_shape_input(name, lo, opt, hi)
            except (RuntimeError, ValueError, TypeError) as exc:
                raise fail(f"shape tensor {name}: TensorRT rejected min/opt/max values {lo}/{opt}/{hi}: {exc}") from exc
            lines.append(f"profile {name} (shape tensor values): min={lo} opt={opt} max={hi}")
            continue
        declared = inputs[name]
        for label, shape in (("min", lo), ("opt", opt), ("max", hi)):
            if len(shape) != len(declared):
                raise fail(
                    f"input {name}: {label} shape {shape} has rank {len(shape)}, the model's has "
                    f"rank {len(declared)} {list(declared)}"
                )
            for axis, (want, have) in enumerate(zip(shape, declared, strict=True)):
                if have >= 0 and want != have:
                    raise fail(
                        f"input {name}: {label} shape {shape} sets static axis {axis} to {want}, "
                        f"the model fixes it at {have}"
                    )
        try:
            opt_profile.set_shape(name, lo, opt, hi)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise fail(f"input {name}: TensorRT rejected min/opt/max {lo}/{opt}/{hi}: {exc}") from exc
        lines.append(f"profile {name}: min={lo} opt={opt} max={hi}")
    if config.add_optimization_profile(opt_profile) < 0:
        raise fail("TensorRT rejected the optimization profile")
    return lines

