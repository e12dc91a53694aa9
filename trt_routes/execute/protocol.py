"""The measurement protocol as a worker runs it: fixed warm-up, then warm-up until timings settle
(bounded), then the timed repeats; plus the noise context recorded beside every measurement.

Works through any backend's ``Runner.time`` (a window of runs is ``time(feeds, 0, window, 1)``).
Noise context: CPU load (1-minute load average and the busy share of every CPU while measuring, from
/proc/stat, when the measurement lasted at least one clock tick; where the verdict matters,
``measurement.busy: refuse``, the window is stretched to enough ticks to judge) and, for GPU targets,
clocks, temperature, power and throttle reasons through NVML (``pynvml`` from nvidia-ml-py, imported
lazily; absent: nothing recorded)."""

from __future__ import annotations

__all__ = ["NoiseContext", "SettleSpec", "settle", "settle_spec", "timed_samples"]

import functools
import os
import resource
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trt_routes.backends.base import Feeds, Runner
from trt_routes.backends.cuda_device import nvml_session
from trt_routes.evidence.noise import JUDGE_TICKS

if TYPE_CHECKING:  # a worker imports this module, and needs no manifest (nor pydantic): ~45 ms of its start
    from trt_routes.manifest.schema import Settle


@dataclass(frozen=True)
class SettleSpec:
    """Warm-up until settled: windows of ``window`` runs until a window's median is within ``tolerance``
    (relative) of the previous window's, at most ``max_runs`` runs. ``window == 0``: off."""

    window: int = 0
    tolerance: float = 0.05
    max_runs: int = 200


def settle_spec(settle: Settle | None) -> SettleSpec:
    """The manifest's ``measurement.settle`` as the worker takes it."""
    if settle is None:
        return SettleSpec()
    return SettleSpec(window=settle.window, tolerance=settle.tolerance, max_runs=settle.max_runs)


def settle(time_window: Callable[[int], list[float]], spec: SettleSpec) -> dict[str, Any]:
    """Run warm-up windows until two consecutive window medians agree; what happened, for trial metadata."""
    if spec.window <= 0:
        return {}
    medians: list[float] = []
    runs = 0
    settled = False
    while runs + spec.window <= max(spec.max_runs, spec.window):
        medians.append(statistics.median(time_window(spec.window)))
        runs += spec.window
        if len(medians) >= 2 and abs(medians[-1] - medians[-2]) <= spec.tolerance * medians[-2]:
            settled = True
            break
    return {"settle_runs": runs, "settled": settled,
            "settle_medians_ms": [float(f"{m:.4g}") for m in medians[-4:]]}


def timed_samples(runner: Runner, feeds: Feeds, warmup: int, iterations: int, repeats: int,
                  spec: SettleSpec) -> tuple[list[float], dict[str, Any]]:
    """The protocol's samples (``iterations * repeats``) and what the warm-up did."""
    if warmup:
        runner.time(feeds, warmup, 1, 1)  # the fixed warm-up (its one timed run is discarded)
    meta = settle(lambda n: runner.time(feeds, 0, n, 1), spec)
    return runner.time(feeds, 0, iterations, repeats), meta


# -- noise context ---------------------------------------------------------------------------


@functools.cache
def _proc_stat() -> int:
    """This process's /proc/stat descriptor, opened once (a failure is not cached: the next call retries)."""
    return os.open("/proc/stat", os.O_RDONLY)


def _my_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on when that is fewer than the machine's (a pool worker pinned to its
    cores, a container's cpuset), else None (all of them)."""
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None
    total = os.cpu_count()
    return frozenset(mine) if total is not None and len(mine) < total else None


def _cpu_jiffies(cpus: frozenset[int] | None = None) -> tuple[int, int] | None:
    """(busy, total) jiffies since boot from /proc/stat, of ``cpus`` (its per-CPU lines) or of all CPUs;
    None where it cannot be read.

    The file stays open and is re-read from offset 0 (the kernel regenerates it): right after a
    measurement has flushed the caches, a path lookup and open cost ~5x the read itself."""
    try:
        text = os.pread(_proc_stat(), 1 << 16 if cpus is not None else 256, 0)
        lines = text.split(b"\n")
        if cpus is None:
            rows = [lines[0]]
        else:
            rows = [line for line in lines if line[:3] == b"cpu" and line[3:4].isdigit()
                    and int(line.split(maxsplit=1)[0][3:]) in cpus]
        busy = total = 0
        for row in rows:
            fields = [int(x) for x in row.split()[1:]]
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
            busy, total = busy + sum(fields) - idle, total + sum(fields)
    except (OSError, ValueError, IndexError):
        return None
    return (busy, total) if total > 0 else None


_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _own_cpu_s() -> float:
    """This process's CPU time, every thread, ended ones too (getrusage: microseconds, where os.times
    counts whole clock ticks)."""
    t = resource.getrusage(resource.RUSAGE_SELF)
    return t.ru_utime + t.ru_stime


_JUDGE_MAX_S = 1.0  # the longest a window is stretched (a host whose clock ticks do not advance)


def _stretch(start: tuple[int, int], cpus: frozenset[int] | None) -> tuple[int, int] | None:
    """Sleep in short steps until /proc/stat has counted ``JUDGE_TICKS`` since ``start``. Asleep, this
    process uses no CPU: what the ticks add is the others' work, at the rate they kept it up."""
    deadline = time.monotonic() + _JUDGE_MAX_S
    end = _cpu_jiffies(cpus)
    while end is not None and end[1] - start[1] < JUDGE_TICKS and time.monotonic() < deadline:
        time.sleep(0.005)
        end = _cpu_jiffies(cpus)
    return end


def _nvml_handle(nvml: Any, device: Mapping[str, Any]) -> Any:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith("GPU-"):
        return nvml.nvmlDeviceGetHandleByUUID(visible)
    return nvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)


def _gpu_reading(device: Mapping[str, Any]) -> dict[str, Any] | None:
    with nvml_session() as nvml:
        return None if nvml is None else _read_gpu(nvml, device)


def _read_gpu(nvml: Any, device: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        handle = _nvml_handle(nvml, device)
        reading: dict[str, Any] = {
            "temp_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "power_w": round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, 1),
            "util_pct": nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
        }
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        reading["throttle_reasons"] = int(reasons(handle))
        return reading
    except Exception:  # noise context is best effort: a driver hiccup must not fail a trial
        return None


class NoiseContext:
    """Readings taken before and after a measurement; ``finish()`` gives the trial metadata. The CPU share
    is read on the CPUs this worker may run on: a pool's other worker, pinned to its own cores, is not
    noise to this one (it was, on every trial of ``--workers 2``), a process on these cores is."""

    def __init__(self, target: Mapping[str, Any] | None = None) -> None:
        target = target or {}
        device = target.get("device") or {}
        self.gpu = target.get("kind") == "gpu" or device.get("device") == "gpu"
        self.device = device
        self.cpus = _my_cpus()
        self.jiffies = _cpu_jiffies(self.cpus)
        self.own = _own_cpu_s()
        self.gpu_before = _gpu_reading(device) if self.gpu else None

    def finish(self, judge: bool = False) -> dict[str, Any]:
        """The readings. ``judge``: the busy-host verdict will refuse the trial, so a window shorter than
        ``JUDGE_TICKS`` is stretched until it can tell (ticks are 10 ms per CPU read: about 0.1 s on 2 CPUs,
        0.2 s on one pinned core; only short trials)."""
        meta: dict[str, Any] = {}
        end = _cpu_jiffies(self.cpus)
        if judge and self.jiffies is not None and end is not None and end[1] - self.jiffies[1] < JUDGE_TICKS:
            end = _stretch(self.jiffies, self.cpus)
        if hasattr(os, "getloadavg"):
            meta["loadavg"] = round(os.getloadavg()[0], 2)
        if self.jiffies is not None and end is not None and end[1] > self.jiffies[1]:
            total = end[1] - self.jiffies[1]
            meta["cpu_ticks"] = total
            meta["cpu_busy"] = round((end[0] - self.jiffies[0]) / total, 3)
            # what other processes kept busy: the noise this measurement competed with
            own = (_own_cpu_s() - self.own) * _HZ
            meta["cpu_busy_others"] = round(max(0.0, (end[0] - self.jiffies[0] - own) / total), 3)
        meta["cpu_count"] = os.cpu_count() if self.cpus is None else len(self.cpus)
        if self.gpu:
            after = _gpu_reading(self.device)
            if self.gpu_before is not None and after is not None:
                meta["gpu"] = {k: [self.gpu_before[k], after[k]] for k in after}
        return meta
