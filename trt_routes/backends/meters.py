"""What the hardware reports about a running engine: peak memory and energy, read by the worker around
load + run (memory) and around the timed runs (energy). Every reading is best effort: where the host
cannot tell, the fact is absent (None), never zero.

- Memory on CPU: the worker process's peak RSS (``VmHWM`` in /proc/self/status) over its RSS before the
  engine is loaded (``VmRSS``). The peak is reset first by writing ``5`` to /proc/self/clear_refs (Linux
  4.0+), so one worker's earlier trials do not hide this one's peak; where the reset is refused the
  reading is absent (``ru_maxrss`` is a lifetime high-water mark and would say 0 for a smaller engine).
- Memory on GPU: NVML's used memory of the target device, after minus before (the device's, so other
  processes on it count: a GPU to itself matters).
- Energy: the NVML total energy counter (mJ) of the target device on GPU targets; on CPUs the RAPL package
  counters /sys/class/powercap/intel-rapl:N/energy_uj (top-level zones only; wrap-around handled with
  ``max_energy_range_uj``) where they are readable (often root only)."""

from __future__ import annotations

__all__ = ["EnergyMeter", "MemoryMeter", "energy_readable", "rapl_zones", "unmeasurable"]

import glob
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trt_routes.backends.cuda_device import nvml_session

RAPL_GLOB = "/sys/class/powercap/intel-rapl:[0-9]*"


def rapl_zones() -> list[Path]:
    """Readable top-level RAPL package zones (``intel-rapl:0``, not its sub-zones ``intel-rapl:0:0``)."""
    zones = []
    for folder in sorted(glob.glob(RAPL_GLOB)):
        if folder.count(":") != 1:
            continue
        path = Path(folder) / "energy_uj"
        try:
            int(path.read_text())
        except (OSError, ValueError):
            continue
        zones.append(Path(folder))
    return zones


def _nvml_device(nvml: Any) -> Any:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith("GPU-"):
        return nvml.nvmlDeviceGetHandleByUUID(visible)
    return nvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)


def _is_gpu(target: Mapping[str, Any] | None) -> bool:
    target = target or {}
    return target.get("kind") == "gpu" or (target.get("device") or {}).get("device") == "gpu"


def energy_readable(target: Mapping[str, Any] | None) -> str | None:
    """None when this host can meter energy for ``target``; else why not (for the manifest error)."""
    if _is_gpu(target):
        with nvml_session() as nvml:
            if nvml is None:
                return "NVML is not available (install nvidia-ml-py and a driver)"
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(_nvml_device(nvml))
            except Exception as exc:
                return f"this GPU reports no energy counter through NVML ({type(exc).__name__})"
        return None
    if not rapl_zones():
        return ("no readable RAPL counter on this host (/sys/class/powercap/intel-rapl:*/energy_uj is absent "
                "or readable by root only)")
    return None


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemoryMeter:
    """Peak memory between ``__init__`` and ``finish()``, in MB (10^6 bytes), with its source."""

    def __init__(self, target: Mapping[str, Any] | None) -> None:
        self.gpu = _is_gpu(target)
        self.before: float | None = None
        if self.gpu:
            self.before = self._gpu_used()
            return
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            return
        rss = _status_kb("VmRSS")
        self.before = rss * 1024.0 if rss is not None else None

    @staticmethod
    def _gpu_used() -> float | None:
        with nvml_session() as nvml:
            if nvml is None:
                return None
            try:
                return float(nvml.nvmlDeviceGetMemoryInfo(_nvml_device(nvml)).used)
            except Exception:
                return None

    def finish(self, engine_bytes: int | None = None) -> dict[str, Any]:
        """The reading, or nothing where it cannot be right: a running engine holds its weights, so a peak
        under half the engine file's bytes means the meter missed the allocation (memory the process had
        already taken and freed is reused without raising its peak), and that wrong small number would make
        routes look cheaper than they are."""
        if self.before is None:
            return {}
        if self.gpu:
            after = self._gpu_used()
            source = "nvml used memory delta"
        else:
            hwm = _status_kb("VmHWM")
            after = hwm * 1024.0 if hwm is not None else None
            source = "VmHWM - VmRSS before load"
        if after is None:
            return {}
        grown = max(0.0, after - self.before)
        if engine_bytes and grown < engine_bytes / 2:
            return {}
        return {"device_memory_mb": grown / 1e6, "memory_source": source}


class EnergyMeter:
    """Energy between ``__init__`` and ``finish(inferences)``, per inference in mJ, with its source."""

    def __init__(self, target: Mapping[str, Any] | None) -> None:
        self.gpu = _is_gpu(target)
        self.zones = [] if self.gpu else rapl_zones()
        self.start = self._read()

    def _read(self) -> list[float] | None:
        if self.gpu:
            with nvml_session() as nvml:
                if nvml is None:
                    return None
                try:
                    return [float(nvml.nvmlDeviceGetTotalEnergyConsumption(_nvml_device(nvml)))]  # mJ
                except Exception:
                    return None
        if not self.zones:
            return None
        try:
            return [int((z / "energy_uj").read_text()) / 1000.0 for z in self.zones]  # uJ -> mJ
        except (OSError, ValueError):
            return None

    def _range(self, i: int) -> float:
        try:
            return int((self.zones[i] / "max_energy_range_uj").read_text()) / 1000.0
        except (OSError, ValueError, IndexError):
            return 0.0

    def finish(self, inferences: int) -> dict[str, Any]:
        end = self._read()
        if self.start is None or end is None or len(end) != len(self.start) or inferences <= 0:
            return {}
        total = 0.0
        for i, (a, b) in enumerate(zip(self.start, end, strict=True)):
            total += b - a if b >= a else b + self._range(i) - a  # a RAPL counter wrapped
        if total <= 0:
            return {}  # the counter did not move (too coarse for this run): unknown, not zero
        return {"energy": total / inferences, "energy_source": "nvml total energy" if self.gpu else "rapl package"}


def unmeasurable(facts: tuple[str, ...] | list[str], target: Mapping[str, Any],
                 reported: frozenset[str] = frozenset()) -> tuple[str, str] | None:
    """The first of ``facts`` this host cannot measure for ``target``, and why; None when all can be.
    ``reported``: facts the backend reports itself (``Backend.reported_facts``). Only energy depends on
    the hardware: latency, throughput, engine size and build time always exist, and memory is read from
    /proc (CPU) or NVML (GPU, where a GPU target matched at all)."""
    if "energy" in facts and "energy" not in reported:
        why = energy_readable(target)
        if why is not None:
            return "energy", why
    return None
