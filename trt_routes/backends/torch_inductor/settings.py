"""Build settings of the torch-inductor backend (manifest ``settings``): mode, dtype, device and friends.

Unknown names and values are rejected with the accepted ones: a typo must never build the default."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trt_routes.backends.base import SettingError


@dataclass(frozen=True)
class Setting:
    name: str
    choices: tuple[Any, ...]
    default: Any
    help: str


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("mode", ("jit", "aot"), "jit",
            "jit: torch.compile with the route applied (the engine file is the recipe that recreates it); "
            "aot: an AOTInductor package (.pt2) compiled ahead of time, the file measured and deployed"),
    Setting("dtype", ("float32", "float16", "bfloat16"), "float32",
            "precision the model runs in: parameters and floating inputs are cast to it"),
    Setting("device", ("auto", "cpu", "cuda"), "auto",
            "auto: the target's device (cpu targets run on the CPU, gpu targets on the matched GPU)"),
    Setting("matmul_precision", ("highest", "high", "medium"), "highest",
            "torch.set_float32_matmul_precision while building and measuring (high/medium allow TF32 "
            "for float32 matmuls on NVIDIA GPUs)"),
    Setting("fullgraph", (False, True), False,
            "mode jit: torch.compile(fullgraph=True) makes a graph break a build error instead of a "
            "silent split into several graphs"),
)}


def check_settings(settings: Mapping[str, Any], target_kind: str) -> dict[str, Any]:
    """Every setting with defaults filled in and ``device`` resolved to "cpu" or "cuda"."""
    out = {name: s.default for name, s in SETTINGS.items()}
    for name, value in sorted(settings.items()):
        setting = SETTINGS.get(name)
        if setting is None:
            close = difflib.get_close_matches(name, list(SETTINGS), n=1)
            raise SettingError(name, f"unknown torch-inductor setting '{name}'"
                               + (f" (did you mean '{close[0]}'?)" if close else ""),
                               "torch-inductor settings: " + ", ".join(sorted(SETTINGS)))
        if isinstance(setting.default, bool):
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, str) and value in setting.choices
        if not ok:
            allowed = " | ".join(str(c).lower() if isinstance(c, bool) else str(c) for c in setting.choices)
            raise SettingError(name, f"setting {name}: {value!r} is not allowed ({setting.help})",
                               f"use one of: {allowed}")
        out[name] = value
    kind = "cuda" if target_kind == "gpu" else "cpu"
    if out["device"] == "auto":
        out["device"] = kind
    elif out["device"] != kind:
        raise SettingError("device", f"setting device: {out['device']} does not match the target, which is "
                           f"a {target_kind} target", "leave device at auto, or use a target of the same kind")
    if out["fullgraph"] and out["mode"] == "aot":
        raise SettingError("fullgraph", "setting fullgraph applies in mode jit only: torch.export (mode aot) "
                           "always captures one whole graph", "remove it")
    return out
