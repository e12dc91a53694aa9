"""Backend registry: name -> lazily imported class, with install hints; plugins by entry point."""

from __future__ import annotations

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "ENV_VAR", "doctor", "get", "known", "require"]

import importlib
import os
from functools import cache
from importlib import metadata

from trt_routes.backends.base import Backend
from trt_routes.errors import BackendUnavailable, UsageError

BUILTIN: dict[str, tuple[str, str]] = {
    "onnxruntime": ("trt_routes.backends.onnxruntime:OnnxRuntimeBackend", "pip install onnxruntime"),
    "onnxruntime-cuda": ("trt_routes.backends.onnxruntime_cuda:OnnxRuntimeCudaBackend",
                         "pip install 'trt-routes[cuda]' (see docs/onnx-gpu.md)"),
    "tensorrt": ("trt_routes.backends.tensorrt:TensorRTBackend", "pip install 'trt-routes[tensorrt]'"),
    "torch-inductor": ("trt_routes.backends.torch_inductor:TorchInductorBackend", "pip install 'trt-routes[torch]'"),
    "replay": ("trt_routes.backends.replay:ReplayBackend", "set TRT_ROUTES_LANDSCAPE to a landscape file"),
}

ENTRY_POINT_GROUP = "trt_routes.backends"
#: Ad-hoc plugins without packaging: "name=module:Class,other=module:Class" (inherited by workers).
ENV_VAR = "TRT_ROUTES_BACKENDS"


def known() -> dict[str, str]:
    """Every backend name this installation knows, with its dotted class path."""
    names = {name: path for name, (path, _hint) in BUILTIN.items()}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        names.setdefault(ep.name, ep.value)
    for item in filter(None, (p.strip() for p in os.environ.get(ENV_VAR, "").split(","))):
        name, sep, path = item.partition("=")
        if not sep or ":" not in path:
            raise UsageError(f"{ENV_VAR}: '{item}' is not name=module:Class")
        names[name.strip()] = path.strip()
    return names


@cache
def get(name: str) -> Backend:
    """The backend instance for ``name``; raises BackendUnavailable with an install hint."""
    paths = known()
    if name not in paths:
        import difflib

        close = difflib.get_close_matches(name, list(paths), n=1)
        raise UsageError(
            f"unknown backend '{name}'",
            f"did you mean '{close[0]}'?" if close else f"known backends: {', '.join(sorted(paths))}",
        )
    module_name, _, cls_name = paths[name].partition(":")
    hint = BUILTIN.get(name, ("", f"install the package that provides backend '{name}'"))[1]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailable(f"backend '{name}' cannot be imported: {exc}", hint) from exc
    cls = getattr(module, cls_name)
    return cls()  # type: ignore[no-any-return]


def require(name: str) -> Backend:
    """Like ``get`` but also checks the backend is usable on this machine."""
    backend = get(name)
    reason = backend.unavailable_reason()
    if reason:
        raise BackendUnavailable(reason, backend.install_hint)
    return backend


def doctor() -> list[tuple[str, str, dict[str, str]]]:
    """Every known backend as (name, why it cannot run here or "", what it found: versions, providers,
    the CUDA runtime and cuDNN loaded), for ``trt-routes doctor``."""
    rows: list[tuple[str, str, dict[str, str]]] = []
    for name in sorted(known()):
        try:
            backend = get(name)
            reason = backend.unavailable_reason() or ""
            reason = f"{reason} (install: {backend.install_hint})" if reason else ""
            found = backend.software() if not reason else {}
        except Exception as exc:  # one broken backend must not hide the others
            reason, found = str(getattr(exc, "message", exc)), {}
        rows.append((name, reason, found))
    return rows
