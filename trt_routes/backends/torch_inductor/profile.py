"""``torch.profiler`` over a loaded torch-inductor engine, as a layer profile (``Backend.profile``).

After ``warmup`` runs, each of ``runs`` runs is profiled on its own (CPU activity, and CUDA on a GPU target), in
the worker that loaded the engine, never during a timed run. A layer is one profiler event's own (self) time in
a run, summed over its calls there; its time over the runs is the median (``evidence.layers.median_layers``):

- on a GPU, the device time of each kernel: Inductor's generated Triton kernels (``triton_poi_fused_...``, named
  by the fusion Inductor made) and the library kernels of extern operators (cuBLAS, cuDNN);
- on the CPU, each operator's own host time: the aten operators Inductor calls out to (``aten::addmm``,
  ``aten::mkldnn_convolution``), and the generated C++ kernels, whose time is the compiled graph's own time
  (``CompiledFxGraph``: Inductor's C++ kernels carry no profiler mark unless built with
  ``cpp.enable_kernel_profile``, which would time other code than the trial's), plus Dynamo's guard lookup and
  the AOT wrapper around it.

Routes that fuse differently show as kernels only one side has; ``explain --layers`` pairs the rest by name."""

from __future__ import annotations

import re
import statistics
import time
from typing import Any

from trt_routes.backends.base import Feeds
from trt_routes.evidence.layers import LayerProfile, median_layers

_GRAPH = re.compile(r"^## Call CompiledFxGraph \S+ ##$")
#: Device-side events of the profiler itself (CUPTI's activity buffers), not of the engine.
_PROFILER_OWN = frozenset({"Activity Buffer Request"})


def layer_name(key: str) -> tuple[str, str]:
    """(layer name, op) of a profiler event key: the compiled graph without its hash (two routes' graphs pair),
    a generated kernel's kind as its op (``triton_poi``, ``cpp_fused``), an operator as itself."""
    if _GRAPH.match(key):
        return "CompiledFxGraph", "inductor graph (generated C++ kernels)"
    if key.startswith("triton_"):
        return key, key.split("_fused", 1)[0]
    if "cpp_fused" in key:
        return key, "cpp_fused"
    return key, key


def profile_runner(runner: Any, feeds: Feeds, *, backend: str, route: str, warmup: int = 3,
                   runs: int = 10) -> LayerProfile:
    """The layer profile of ``runner`` (a loaded ``TorchRunner``) on ``feeds``: the call a timed run makes."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    gpu = bool(runner.on_gpu)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if gpu else [])]
    per_run: list[list[tuple[str, str, str, float]]] = []
    walls: list[float] = []
    with runner.calling(feeds) as call:
        for _ in range(warmup):
            call()
        for _ in range(runs):
            with profile(activities=activities) as prof:
                start = time.perf_counter()
                call()
                if gpu:
                    torch.cuda.synchronize(runner.device)
                walls.append((time.perf_counter() - start) * 1000.0)
            per_run.append([(*layer_name(str(e.key)), "cuda" if gpu else "cpu", micros / 1000.0)
                            for e in prof.key_averages() if (micros := _own_micros(e, gpu)) > 0])
    note = ("kernel device times (CUDA): what the GPU ran, host-side operators left out" if gpu else
            "operator host times; Inductor's generated C++ kernels are the compiled graph's own time")
    return LayerProfile(backend, route, runs, statistics.median(walls) if walls else None,
                        median_layers([r for r in per_run if r]), note=note)


def _own_micros(event: Any, gpu: bool) -> float:
    """An event's own time in µs: on a GPU only device-side events (kernels, copies) count, since a host
    operator's device time is its kernels' again; the profiler's own buffer requests are left out."""
    if not gpu:
        return float(event.self_cpu_time_total)
    from torch.autograd import DeviceType

    if event.device_type != DeviceType.CUDA or str(event.key) in _PROFILER_OWN:
        return 0.0
    return float(getattr(event, "self_device_time_total", 0.0))
