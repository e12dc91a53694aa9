"""Build settings the TensorRT backend accepts (manifest ``settings``) and how they map to IBuilderConfig.

Unknown names are rejected with the list of accepted ones: a typo must not silently build the default."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trt_routes.errors import ManifestError

Value = str | int | float | bool


@dataclass(frozen=True)
class Setting:
    """One accepted setting: its type and range, and where it goes.

    At most one of ``config_attr`` (an IBuilderConfig property, its value converted to the TensorRT enum
    ``enum`` when given), ``flag`` (a BuilderFlag set or cleared) and ``pool`` (a MemoryPoolType limit,
    the value shifted left by ``shift`` into bytes) says how the builder gets it. A setting with none of
    them is read by trt-routes itself (``phase`` "runtime": the runner; "backend": the build around
    TensorRT). These names are data so the conformance test can check each against the real module."""

    name: str
    kind: str  # "int" | "bool" | "enum" | "path"
    help: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    config_attr: str | None = None
    enum: str | None = None
    flag: str | None = None
    pool: str | None = None
    shift: int = 0
    phase: str = "build"  # "build" | "runtime" | "backend"
    default: Any = None  # what an absent setting means (settings trt-routes reads itself)

    def apply(self, trt: Any, config: Any, value: Any) -> None:
        """Hand the normalized ``value`` to ``config`` (an IBuilderConfig of module ``trt``)."""
        if self.config_attr is not None:
            converted = getattr(getattr(trt, self.enum), str(value).upper()) if self.enum else value
            setattr(config, self.config_attr, converted)
        elif self.flag is not None:
            flag = getattr(trt.BuilderFlag, self.flag)
            if value:
                config.set_flag(flag)
            else:
                config.clear_flag(flag)
        elif self.pool is not None:
            config.set_memory_pool_limit(getattr(trt.MemoryPoolType, self.pool), int(value) << self.shift)


#: The timing-cache policies (setting ``timing_cache``); see ``trt_routes.backends.tensorrt.timing_cache``.
TIMING_CACHE_MODES = ("per_route", "fresh")

SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "builder_optimization_level",
            "int",
            "IBuilderConfig.builder_optimization_level (0-5, TensorRT's default 3)",
            0,
            5,
            config_attr="builder_optimization_level",
        ),
        Setting(
            "hardware_compatibility_level",
            "enum",
            "build for other GPU architectures too (then part of the job)",
            choices=("none", "ampere_plus", "same_compute_capability"),
            config_attr="hardware_compatibility_level",
            enum="HardwareCompatibilityLevel",
        ),
        Setting(
            "tiling_optimization_level",
            "enum",
            "IBuilderConfig.tiling_optimization_level",
            choices=("none", "fast", "moderate", "full"),
            config_attr="tiling_optimization_level",
            enum="TilingOptimizationLevel",
        ),
        Setting("max_aux_streams", "int", "IBuilderConfig.max_aux_streams", 0, 64, config_attr="max_aux_streams"),
        Setting(
            "avg_timing_iterations",
            "int",
            "IBuilderConfig.avg_timing_iterations",
            1,
            1000,
            config_attr="avg_timing_iterations",
        ),
        Setting(
            "max_num_tactics",
            "int",
            "IBuilderConfig.max_num_tactics (-1: no limit)",
            -1,
            None,
            config_attr="max_num_tactics",
        ),
        Setting(
            "l2_limit_for_tiling",
            "int",
            "IBuilderConfig.l2_limit_for_tiling in bytes",
            0,
            None,
            config_attr="l2_limit_for_tiling",
        ),
        Setting("workspace_mib", "int", "memory pool limit WORKSPACE in MiB", 0, None, pool="WORKSPACE", shift=20),
        Setting(
            "tactic_dram_mib", "int", "memory pool limit TACTIC_DRAM in MiB", 0, None, pool="TACTIC_DRAM", shift=20
        ),
        Setting(
            "tactic_shared_memory_kib",
            "int",
            "memory pool limit TACTIC_SHARED_MEMORY in KiB",
            0,
            None,
            pool="TACTIC_SHARED_MEMORY",
            shift=10,
        ),
        Setting(
            "version_compatible",
            "bool",
            "BuilderFlag.VERSION_COMPATIBLE; such engines embed a lean runtime, which the loading Runtime "
            "must allow (engine_host_code_allowed)",
            flag="VERSION_COMPATIBLE",
        ),
        Setting(
            "profiling_verbosity",
            "enum",
            "IBuilderConfig.profiling_verbosity: detailed records each layer's type and tactic in the engine "
            "(explain --layers shows them; TensorRT: it 'will generally increase latency in enqueueV3()'); "
            "layer_names_only is TensorRT's default; none records no layer names",
            choices=("layer_names_only", "detailed", "none"),
            config_attr="profiling_verbosity",
            enum="ProfilingVerbosity",
        ),
        Setting(
            "tf32",
            "bool",
            "BuilderFlag.TF32: float32 convolutions and matrix products may run in TF32 (TensorRT's default: on); "
            "false keeps them float32, as the float32 reference computes them",
            flag="TF32",
        ),
        Setting(
            "strict_nans",
            "bool",
            "BuilderFlag.STRICT_NANS: no optimization that may not propagate NaNs (TensorRT's default: off)",
            flag="STRICT_NANS",
        ),
        Setting(
            "timing_cache",
            "enum",
            "per_route (default): one timing cache file per (TensorRT build, GPU, build settings, route), "
            "so no route's timings pick another route's tactics; fresh: an empty cache for every build, "
            "as trtexec's tuning children without --timingCacheFile",
            choices=TIMING_CACHE_MODES,
            phase="backend",
            default="per_route",
        ),
        Setting(
            "timing_cache_dir",
            "path",
            "folder of the timing caches (default: see backend.timing_cache_dir); not applied to the builder",
            phase="backend",
        ),
        Setting(
            "cuda_graph",
            "bool",
            "time each iteration as one CUDA graph launch: the enqueue is captured once, so launch overhead "
            "of many small kernels stops dominating (trtexec 11.1 does this by default, --noCudaGraph turns "
            "it off; older trtexec had --useCudaGraph); an engine that cannot be captured fails the trial",
            phase="runtime",
            default=False,
        ),
    )
}

#: Settings that do not change what TensorRT builds (left out of the timing-cache key).
NOT_BUILD = frozenset(name for name, s in SETTINGS.items() if s.phase != "build")


#: The builder flags that decide arithmetic precision, and TensorRT's default for each (``precision_flags``).
PRECISION_FLAGS = {"tf32": ("TF32", True), "strict_nans": ("STRICT_NANS", False)}


def precision_flags(settings: Mapping[str, Value]) -> str:
    """The precision flags a build used, in words: ``TF32 on (TensorRT's default), STRICT_NANS off (...)``."""
    given = check_settings({name: settings[name] for name in PRECISION_FLAGS if name in settings})
    return ", ".join(f"{flag} {'on' if given.get(name, default) else 'off'} "
                     + (f"(settings.{name})" if name in given else "(TensorRT's default)")
                     for name, (flag, default) in PRECISION_FLAGS.items())


#: Precision switches that TensorRT 11 removed: precision comes from the network (strong typing).
REMOVED_PRECISION = ("fp16", "bf16", "int8", "fp8", "int4", "fp4", "precision", "strict_types")


def _as_int(value: Value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _as_bool(value: Value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in (
        "true",
        "on",
        "yes",
        "1",
        "false",
        "off",
        "no",
        "0",
    ):
        return value.strip().lower() in ("true", "on", "yes", "1")
    return None


def _normalize(setting: Setting, value: Value) -> tuple[Any, str | None]:
    if setting.kind == "int":
        number = _as_int(value)
        if number is None:
            return None, f"{setting.name} must be an integer, got {value!r}"
        if setting.minimum is not None and number < setting.minimum:
            return None, f"{setting.name} must be >= {setting.minimum}, got {number}"
        if setting.maximum is not None and number > setting.maximum:
            return None, f"{setting.name} must be <= {setting.maximum}, got {number}"
        return number, None
    if setting.kind == "bool":
        flag = _as_bool(value)
        return (
            (flag, None)
            if flag is not None
            else (None, f"{setting.name} must be true or false, got {value!r}")
        )
    if setting.kind == "enum":
        text = str(value).strip().lower()
        if isinstance(value, bool) or text not in setting.choices:
            return None, f"{setting.name} must be one of {', '.join(setting.choices)}, got {value!r}"
        return text, None
    if not isinstance(value, str) or not value.strip():
        return None, f"{setting.name} must be a folder path, got {value!r}"
    return value, None


def check_settings(settings: Mapping[str, Value]) -> dict[str, Any]:
    """Normalized settings; ManifestError naming every unknown or invalid one."""
    problems: list[str] = []
    out: dict[str, Any] = {}
    for name, value in sorted(settings.items()):
        setting = SETTINGS.get(name)
        if setting is None:
            if name.lower() in REMOVED_PRECISION:
                problems.append(
                    f"'{name}': TensorRT 11 removed precision flags; networks are strongly typed, "
                    "so convert the ONNX model (ModelOpt AutoCast, Q/DQ nodes) instead"
                )
                continue
            close = difflib.get_close_matches(name, list(SETTINGS), n=1)
            problems.append(
                f"unknown TensorRT setting '{name}'" + (f" (did you mean '{close[0]}'?)" if close else "")
            )
            continue
        normalized, problem = _normalize(setting, value)
        if problem:
            problems.append(problem)
        else:
            out[name] = normalized
    if problems:
        raise ManifestError("; ".join(problems), "TensorRT settings: " + ", ".join(sorted(SETTINGS)))
    return out


def apply_settings(trt: Any, config: Any, settings: Mapping[str, Any]) -> list[str]:
    """Apply checked settings to ``config``; returns one log line per setting applied."""
    lines: list[str] = []
    for name, value in sorted(settings.items()):
        setting = SETTINGS[name]
        if setting.phase != "build":
            continue
        try:
            setting.apply(trt, config, value)
        except (AttributeError, TypeError, ValueError, RuntimeError) as exc:
            raise ManifestError(
                f"TensorRT {getattr(trt, '__version__', '?')} rejected setting {name}={value!r}: {exc}"
            ) from exc
        lines.append(f"setting {name}={value}")
    return lines


def setting_value(settings: Mapping[str, Any], name: str) -> Any:
    """A checked setting's value, or the setting's default when absent."""
    return settings.get(name, SETTINGS[name].default)
