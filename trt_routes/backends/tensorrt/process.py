"""What one process keeps of TensorRT, once: the Runtime, the build-route catalog text, the distribution.

A worker serves many tasks; creating a Builder only to read ``all_build_routes``, or a Runtime (with its
own logger) per engine, costs a CUDA context's worth of setup each time and gives TensorRT several
loggers, which it treats as one. State is kept per imported ``tensorrt`` module object (tests swap
modules), so it goes away with the module."""

from __future__ import annotations

import re
import sys
import threading
import weakref
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

#: Top-level modules that carry TensorRT, most specific first: the compiled bindings (the
#: ``tensorrt-cuXX-bindings`` wheels) and the ``tensorrt`` package (``tensorrt-cuXX`` re-exports them;
#: the tarball's wheel is the bindings itself).
TENSORRT_MODULES = ("tensorrt_bindings", "tensorrt")
_CUDA_IN_NAME = re.compile(r"(?:^|[-_.])cu(\d+)(?:[-_.]|$)")
_CUDA_IN_PATH = re.compile(r"cuda-(\d+\.\d+)")


@dataclass(frozen=True)
class TensorRTDistribution:
    """The installed distribution that provides ``tensorrt`` and the CUDA version TensorRT was built for.

    cu12 and cu13 builds of one release report the same ``__version__`` (11.4.0.106 both), and their
    bindings are byte-identical; only the distribution name tells them apart."""

    name: str  # "tensorrt_cu12_bindings", or "unknown"
    version: str
    cuda: str  # "12", "12.9" (from a tarball's library path), or "unknown"

    @property
    def text(self) -> str:
        return f"{self.name} {self.version}" if self.name != "unknown" else "unknown"


def _owner(module_name: str, module: ModuleType | None) -> metadata.Distribution | None:
    """The distribution whose files hold ``module`` (several may claim the same top-level name)."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    loaded = Path(file).resolve()
    for dist in metadata.distributions():
        top = dist.read_text("top_level.txt")
        if top is not None:
            claims = module_name in top.split()
        else:
            claims = any(str(f).startswith(f"{module_name}/") for f in dist.files or ())
        if claims and Path(str(dist.locate_file(f"{module_name}/__init__.py"))).resolve() == loaded:
            return dist
    return None


def _library_cuda() -> str | None:
    """The CUDA version in the path of the loaded libnvinfer (TensorRT's tarballs are named
    ``TensorRT-11.4.0.106.Linux.x86_64-gnu.cuda-12.9``), from /proc/self/maps; None elsewhere."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in maps.splitlines():
        if "libnvinfer.so" in line:
            found = _CUDA_IN_PATH.search(line)
            if found:
                return found.group(1)
    return None


def find_distribution(trt: ModuleType) -> TensorRTDistribution:
    """Which distribution provides the imported ``trt`` (read from importlib.metadata), and its CUDA."""
    modules: dict[str, ModuleType | None] = {"tensorrt_bindings": sys.modules.get("tensorrt_bindings"),
                                             "tensorrt": trt}
    for module_name in TENSORRT_MODULES:
        dist = _owner(module_name, modules[module_name])
        if dist is None:
            continue
        name = str(dist.metadata["Name"])
        found = _CUDA_IN_NAME.search(name.lower())
        cuda = _library_cuda() or (found.group(1) if found else "unknown")
        return TensorRTDistribution(name=name, version=str(dist.version), cuda=cuda)
    return TensorRTDistribution(name="unknown", version=str(getattr(trt, "__version__", "")),
                                cuda=_library_cuda() or "unknown")


class ProcessState:
    """TensorRT objects this process made once for one ``tensorrt`` module."""

    def __init__(self) -> None:
        self.runtime: Any = None
        self.logger: Any = None  # trt_logger.process_logger: TensorRT keeps one logger per process
        self.catalog_text: str | None = None
        self.distribution: TensorRTDistribution | None = None


_STATES: weakref.WeakKeyDictionary[ModuleType, ProcessState] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def process_state(trt: ModuleType) -> ProcessState:
    with _LOCK:
        state = _STATES.get(trt)
        if state is None:
            state = _STATES[trt] = ProcessState()
        return state


def process_runtime(trt: ModuleType, logger: Any) -> Any:
    """The one ``trt.Runtime`` of this process (``TypeError`` from TensorRT when it cannot make one)."""
    state = process_state(trt)
    if state.runtime is None:
        state.runtime = trt.Runtime(logger)
    return state.runtime


def distribution(trt: ModuleType) -> TensorRTDistribution:
    state = process_state(trt)
    if state.distribution is None:
        state.distribution = find_distribution(trt)
    return state.distribution
