"""Build settings the TensorRT backend accepts (manifest ``settings``) and how they map to IBuilderConfig.

Unknown names are rejected with the list of accepted ones: a typo must not silently build the default."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trt_routes.errors import ManifestError

Value = str | int | float | bool


@dataclass(frozen=True)
class Setting:
    """One accepted setting: its type, range and how it is applied to an IBuilderConfig."""

    name: str
    kind: str  # "int" | "bool" | "enum" | "path"
    help: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    apply: Callable[[Any, Any, Any], None] | None = None  # (trt, config, normalized value)


def _attr(attr: str) -> Callable[[Any, Any, Any], None]:
    def apply(_trt: Any, config: Any, value: Any) -> None:
        setattr(config, attr, value)

    return apply


def _enum_attr(attr: str, enum: str) -> Callable[[Any, Any, Any], None]:
    def apply(trt: Any, config: Any, value: Any) -> None:
        setattr(config, attr, getattr(getattr(trt, enum), str(value).upper()))

    return apply


def _pool(pool: str, shift: int) -> Callable[[Any, Any, Any], None]:
    def apply(trt: Any, config: Any, value: Any) -> None:
        config.set_memory_pool_limit(getattr(trt.MemoryPoolType, pool), int(value) << shift)

    return apply


def _flag(flag: str) -> Callable[[Any, Any, Any], None]:
    def apply(trt: Any, config: Any, value: Any) -> None:
        if value:
            config.set_flag(getattr(trt.BuilderFlag, flag))
        else:
            config.clear_flag(getattr(trt.BuilderFlag, flag))

    return apply


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "builder_optimization_level",
            "int",
            "IBuilderConfig.builder_optimization_level (0-5, TensorRT's default 3)",
            0,
            5,
            apply=_attr("builder_optimization_level"),
        ),
        Setting(
            "hardware_compatibility_level",
            "enum",
            "build for other GPU architectures too (then part of the job)",
            choices=("none", "ampere_plus", "same_compute_capability"),
            apply=_enum_attr("hardware_compatibility_level", "HardwareCompatibilityLevel"),
        ),
        Setting(
            "tiling_optimization_level",
            "enum",
            "IBuilderConfig.tiling_optimization_level",
            choices=("none", "fast", "moderate", "full"),
            apply=_enum_attr("tiling_optimization_level", "TilingOptimizationLevel"),
        ),
        Setting(
            "max_aux_streams", "int", "IBuilderConfig.max_aux_streams", 0, 64, apply=_attr("max_aux_streams")
        ),
        Setting(
            "avg_timing_iterations",
            "int",
            "IBuilderConfig.avg_timing_iterations",
            1,
            1000,
            apply=_attr("avg_timing_iterations"),
        ),
        Setting(
            "max_num_tactics",
            "int",
            "IBuilderConfig.max_num_tactics (-1: no limit)",
            -1,
            None,
            apply=_attr("max_num_tactics"),
        ),
        Setting(
            "l2_limit_for_tiling",
            "int",
            "IBuilderConfig.l2_limit_for_tiling in bytes",
            0,
            None,
            apply=_attr("l2_limit_for_tiling"),
        ),
        Setting(
            "workspace_mib",
            "int",
            "memory pool limit WORKSPACE in MiB",
            0,
            None,
            apply=_pool("WORKSPACE", 20),
        ),
        Setting(
            "tactic_dram_mib",
            "int",
            "memory pool limit TACTIC_DRAM in MiB",
            0,
            None,
            apply=_pool("TACTIC_DRAM", 20),
        ),
        Setting(
            "tactic_shared_memory_kib",
            "int",
            "memory pool limit TACTIC_SHARED_MEMORY in KiB",
            0,
            None,
            apply=_pool("TACTIC_SHARED_MEMORY", 10),
        ),
        Setting(
            "version_compatible", "bool", "BuilderFlag.VERSION_COMPATIBLE", apply=_flag("VERSION_COMPATIBLE")
        ),
        Setting(
            "timing_cache_dir",
            "path",
            "folder of the shared timing caches (default: see "
            "backend.timing_cache_dir); not applied to the builder",
        ),
    )
}

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
        if setting.apply is None:
            continue
        try:
            setting.apply(trt, config, value)
        except (AttributeError, TypeError, ValueError, RuntimeError) as exc:
            raise ManifestError(
                f"TensorRT {getattr(trt, '__version__', '?')} rejected setting {name}={value!r}: {exc}"
            ) from exc
        lines.append(f"setting {name}={value}")
    return lines
