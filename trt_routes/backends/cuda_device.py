"""NVIDIA GPU detection for signatures: cuda-python's runtime first, NVML (nvidia-ml-py) as fallback.

Everything is imported lazily; a machine without a GPU, driver or either library gets ``[]``."""

from __future__ import annotations

__all__ = [
    "cuda_check", "cuda_version_text", "gpu_fields", "gpu_local_cpus", "gpu_lock", "load_cudart", "memory_gib",
    "nvml_session",
]

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from trt_routes.backends.base import parse_cpu_list
from trt_routes.errors import BackendUnavailable, TrtRoutesError

CUDA_PYTHON_HINT = "pip install 'cuda-python>=12' (part of 'trt-routes[tensorrt]')"


class CudaError(TrtRoutesError):
    """A CUDA runtime call failed."""


def load_cudart() -> ModuleType:
    """cuda-python's runtime module: ``cuda.bindings.runtime`` (12.6+) or the older ``cuda.cudart``."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        try:
            from cuda import cudart as runtime
        except ImportError as exc:
            raise BackendUnavailable(f"cuda-python is not importable: {exc}", CUDA_PYTHON_HINT) from exc
    return runtime


def cuda_check(rt: ModuleType, result: Any, what: str) -> Any:
    """Unpack a cuda-python ``(err, *values)`` tuple; CudaError naming ``what`` unless err is success."""
    values = tuple(result) if isinstance(result, tuple) else (result,)
    err, rest = values[0], values[1:]
    if err != rt.cudaError_t.cudaSuccess:
        name = getattr(err, "name", str(err))
        raise CudaError(f"CUDA call {what} failed: {name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def cuda_version_text(version: int) -> str:
    """CUDA's integer versions (12080) as text ("12.8")."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def memory_gib(total_bytes: int) -> str:
    """Device memory rounded to whole GiB: NVML and the CUDA runtime report totals that differ by the
    memory the driver reserves (an H200: 140.4 vs 139.8 GiB), and both must give the same signature."""
    return str(round(total_bytes / 2**30))


def _proc_driver_version() -> str | None:
    """The kernel driver's version from /proc (Linux), e.g. '580.159.03'."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return None


def _nvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


@contextlib.contextmanager
def nvml_session() -> Iterator[ModuleType | None]:
    """``pynvml`` initialized for the block (shut down after it), or None without NVML or a driver."""
    nvml = _nvml()
    if nvml is None:
        yield None
        return
    try:
        nvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield nvml
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


SYSFS_PCI = Path("/sys/bus/pci/devices")


def gpu_local_cpus(cuda_ids: list[str]) -> list[frozenset[int] | None]:
    """The CPU cores the kernel lists as local to each GPU (its NUMA node), given the GPUs' indexes or
    UUIDs as CUDA_VISIBLE_DEVICES names them; None where NVML or sysfs cannot tell."""
    with nvml_session() as nvml:
        return [_local_cpus(nvml, cuda_id) if nvml is not None else None for cuda_id in cuda_ids]


def _local_cpus(nvml: ModuleType, cuda_id: str) -> frozenset[int] | None:
    try:
        handle = (nvml.nvmlDeviceGetHandleByUUID(cuda_id) if cuda_id.startswith("GPU-")
                  else nvml.nvmlDeviceGetHandleByIndex(int(cuda_id)))
        bus = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)  # "00000000:18:00.0"
    except Exception:
        return None
    try:
        return parse_cpu_list((SYSFS_PCI / bus[-12:].lower() / "local_cpulist").read_text()) or None
    except (OSError, ValueError):
        return None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return str(value).strip()


def _nvml_driver_version() -> str | None:
    with nvml_session() as nvml:
        if nvml is None:
            return None
        try:
            return _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            return None


def _from_cudart() -> list[dict[str, str]] | None:
    try:
        rt = load_cudart()
    except BackendUnavailable:
        return None
    try:
        count = cuda_check(rt, rt.cudaGetDeviceCount(), "cudaGetDeviceCount")
        cuda_driver = cuda_version_text(
            int(cuda_check(rt, rt.cudaDriverGetVersion(), "cudaDriverGetVersion"))
        )
    except CudaError:
        return None
    driver = _nvml_driver_version() or _proc_driver_version() or "unknown"
    rows: list[dict[str, str]] = []
    for index in range(int(count)):
        prop = cuda_check(rt, rt.cudaGetDeviceProperties(index), "cudaGetDeviceProperties")
        rows.append(
            {
                "gpu_name": _text(prop.name),
                "compute_capability": f"{int(prop.major)}.{int(prop.minor)}",
                "sm_count": str(int(prop.multiProcessorCount)),
                "gpu_memory_gib": memory_gib(int(prop.totalGlobalMem)),
                "driver_version": driver,
                "cuda_driver": cuda_driver,
            }
        )
    return rows


def _from_nvml() -> list[dict[str, str]] | None:
    """NVML has no SM count: those rows lack ``sm_count`` rather than guess it."""
    with nvml_session() as nvml:
        if nvml is None:
            return None
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            cuda_driver = cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion()))
            rows: list[dict[str, str]] = []
            for index in range(int(nvml.nvmlDeviceGetCount())):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                rows.append(
                    {
                        "gpu_name": _text(nvml.nvmlDeviceGetName(handle)),
                        "compute_capability": f"{int(major)}.{int(minor)}",
                        "gpu_memory_gib": memory_gib(int(nvml.nvmlDeviceGetMemoryInfo(handle).total)),
                        "driver_version": driver,
                        "cuda_driver": cuda_driver,
                    }
                )
            return rows
        except Exception:
            return None


def gpu_fields() -> list[dict[str, str]]:
    """One dict of signature fields per visible NVIDIA GPU, in CUDA's device order; [] without one.

    Fields: gpu_name, compute_capability ("9.0"), sm_count, gpu_memory_gib, driver_version
    (the kernel driver, e.g. "580.159.03"), cuda_driver (the CUDA version the driver supports)."""
    rows = _from_cudart()
    if rows is None:
        rows = _from_nvml()
    return rows or []


def gpu_lock(local_index: int = 0) -> Any:
    """A lock file per physical GPU, shared by every process and backend on this machine, so timed runs on
    one GPU never overlap: the GPU ``local_index`` of this process is named as CUDA_VISIBLE_DEVICES lists
    it (an index or a UUID), or by its index where that variable is unset."""
    import os
    import tempfile

    from filelock import FileLock

    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    physical = visible[local_index] if local_index < len(visible) else str(local_index)
    return FileLock(os.path.join(tempfile.gettempdir(), f"trt-routes-gpu-{physical}.lock"))
