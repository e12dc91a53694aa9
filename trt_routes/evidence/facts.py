"""Measured facts of a trial beside its samples, objectives over them, and the Pareto front.

Pure: plain numbers and dicts in, plain numbers and dicts out; no backend, no cache. The facts (names in
``trt_routes.manifest.schema.FACTS``, units in ``UNITS``):

- ``latency.p50``, ``latency.p90``, ``latency.p99`` (ms): quantiles of the trial's timing samples (numpy's
  linear interpolation); ``latency.p50`` is the median selection has always ranked by.
- ``throughput`` (inferences per second, higher is better): ``batch / p50``, ``batch`` being the leading
  dimension of the first input (in name order) at the timed point (the profile's ``opt`` shape), 1 for a
  scalar input. Stored beside it as ``batch``.
- ``device_memory_mb`` (MB = 10^6 bytes): peak memory the engine took while it was loaded and run (see
  ``trt_routes.backends.meters``: on CPU the worker's peak RSS over its RSS before the load, from
  /proc/self/status VmHWM after resetting it through /proc/self/clear_refs; on GPU the NVML used-memory
  delta; or the backend's own accounting where its runner reports one). ``memory_source`` says which.
- ``engine_mb``: the engine's size on disk; ``build_s``: the build's wall time.
- ``energy`` (mJ per inference): energy over the timed runs divided by runs x batch, from the NVML total
  energy counter on GPU targets or RAPL package counters on CPUs where readable (whole-package energy,
  other processes included: a quiet host matters). ``energy_source`` says which.

A fact that was not measured is absent from the dict, never zero."""

from __future__ import annotations

__all__ = ["HIGHER_IS_BETTER", "UNITS", "Front", "batch_of", "better", "derived", "format_fact",
           "latency_facts", "pareto"]

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HIGHER_IS_BETTER = frozenset({"throughput"})
#: The unit of every fact of ``trt_routes.manifest.schema.FACTS`` (tests/unit/test_startup.py checks that both
#: name the same facts: the schema is not imported here, a worker needs neither it nor pydantic).
UNITS = {"latency.p50": "ms", "latency.p90": "ms", "latency.p99": "ms", "throughput": "/s",
         "device_memory_mb": "MB", "engine_mb": "MB", "build_s": "s", "energy": "mJ"}


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``ordered`` (sorted, finite, not empty: a trial with a non-finite sample is crashed)
    as ``numpy.quantile``'s default ("linear": the
    virtual index ``(n - 1) q``, interpolated as numpy's ``_lerp`` does), to the last bit. Not numpy's own: its
    first call imports ``numpy.ma`` (~20 ms, on apply's path to the first job's selection)."""
    h = (len(ordered) - 1) * q
    lo = math.floor(h)
    gamma = h - lo
    a = ordered[min(max(lo, 0), len(ordered) - 1)]
    b = ordered[min(max(lo + 1, 0), len(ordered) - 1)]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def latency_facts(samples: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99 of the samples (ms); empty without samples."""
    if not samples:
        return {}
    ordered = sorted(float(x) for x in samples)
    return {"latency.p50": quantile(ordered, 0.5), "latency.p90": quantile(ordered, 0.9),
            "latency.p99": quantile(ordered, 0.99)}


def batch_of(inputs: Mapping[str, Mapping[str, Any]]) -> int:
    """The rule for throughput's batch: the leading dim of the first input in name order (1: scalar)."""
    for name in sorted(inputs):
        shape = list(inputs[name].get("shape") or [])
        return int(shape[0]) if shape else 1
    return 1


def derived(stored: Mapping[str, Any] | None, samples: Sequence[float], median_ms: float | None,
            build_s: float | None, batch: int | None = None) -> dict[str, float]:
    """A trial's facts: those it stored (``meta["facts"]``), plus what older trials can derive from their
    samples and fields (latency quantiles, p50 = the stored median when samples were not read, build time,
    throughput when ``batch`` is known). Only finite numbers are kept."""
    out: dict[str, float] = {}
    for key, value in (stored or {}).items():
        if key in UNITS and isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)
    for key, value in latency_facts(samples).items():
        out.setdefault(key, value)
    if median_ms is not None:
        out.setdefault("latency.p50", float(median_ms))
    if build_s is not None and "build_s" not in out:
        out["build_s"] = float(build_s)
    stored_batch = (stored or {}).get("batch")
    b = stored_batch if isinstance(stored_batch, int) and stored_batch > 0 else batch
    if "throughput" not in out and b and out.get("latency.p50"):
        out["throughput"] = b / (out["latency.p50"] / 1000.0)
    return out


def better(fact: str, a: float, b: float) -> bool:
    """``a`` is strictly better than ``b`` on ``fact``."""
    return a > b if fact in HIGHER_IS_BETTER else a < b


def format_fact(fact: str, value: float) -> str:
    unit = UNITS.get(fact, "")
    return f"{fact} {value:.3g}{' ' + unit if unit and unit != '/s' else '/s' if unit else ''}"


_WORDS = {"latency.p50": ("faster", "slower"), "latency.p90": ("faster at p90", "slower at p90"),
          "latency.p99": ("faster at p99", "slower at p99"), "throughput": ("higher throughput", "lower throughput"),
          "device_memory_mb": ("less memory", "more memory"), "engine_mb": ("smaller", "larger"),
          "build_s": ("quicker to build", "slower to build"), "energy": ("less energy", "more energy")}


@dataclass(frozen=True)
class Front:
    """The Pareto front of routes over ``axes``: ``front`` in the given order, and for every dominated route
    the front route that dominates it and why (``"dominated by -x=1: faster and smaller"``)."""

    axes: tuple[str, ...]
    front: tuple[str, ...]
    dominated: dict[str, tuple[str, str]] = field(default_factory=dict)


def _dominates(a: Mapping[str, float], b: Mapping[str, float], axes: Sequence[str]) -> bool:
    at_least = all(not better(x, b[x], a[x]) for x in axes)
    return at_least and any(better(x, a[x], b[x]) for x in axes)


def pareto(points: Mapping[str, Mapping[str, float]], axes: Sequence[str],
           describe: Any = str) -> Front:
    """The front of ``points`` (route -> facts) over the ``axes`` every point has (an axis some point
    lacks is left out: absent is not zero). A dominated route's reason names the front route that
    dominates it with the largest number of strictly better axes, and those axes in words."""
    used = tuple(a for a in axes if points and all(a in p for p in points.values()))
    if not used:
        return Front((), tuple(points), {})
    front = [r for r in points if not any(_dominates(points[o], points[r], used) for o in points if o != r)]
    dominated: dict[str, tuple[str, str]] = {}
    for r in points:
        if r in front:
            continue
        by = [o for o in front if _dominates(points[o], points[r], used)]
        best = max(by, key=lambda o: sum(better(x, points[o][x], points[r][x]) for x in used))
        words = [_WORDS.get(x, (f"better {x}", ""))[0] for x in used if better(x, points[best][x], points[r][x])]
        said = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
        dominated[r] = (best, f"dominated by {describe(best)}: {said}")
    return Front(used, tuple(front), dominated)
