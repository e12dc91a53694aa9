"""TensorRT's per-layer profiler as a layer profile (``Backend.profile`` of the TensorRT backend).

The engine is loaded for the profile alone and an ``IProfiler`` attached to its execution context; after
warm-up inferences, each profiled inference reports every layer's time once its stream synchronized
(``enqueue_emits_profile`` off, ``report_to_profiler``), the way trtexec's ``--dumpProfile`` runs a
separate profiling pass. Never a CUDA graph: a replayed graph reports no layer. That runner is closed
afterwards, so no timed run ever has a profiler attached.

A layer's name is TensorRT's (an ONNX node's name, or fused ones joined by ``" + "``, or a reformat it
inserted); its op is the ONNX op types the name ends with (``Conv+Relu``), or ``Reformat``. An engine built at
``profiling_verbosity: detailed`` (a setting) also gives, through the engine inspector, each layer's type (the op)
and tactic (where it ran): a route that makes TensorRT pick another kernel shows there. At TensorRT's default
verbosity (``LAYER_NAMES_ONLY``) a profile has names and times, and says so."""

from __future__ import annotations

import json
import statistics
from typing import Any

from trt_routes.backends.base import Feeds
from trt_routes.evidence.layers import LayerProfile, median_layers


def layer_op(name: str) -> str:
    """The op of a TensorRT layer name: ``/layer1/conv1/Conv + /layer1/relu/Relu`` -> ``Conv+Relu``."""
    if "reformat" in name.lower():
        return "Reformat"
    return "+".join(part.strip().rsplit("/", 1)[-1].split("_")[0] or "?" for part in name.split(" + "))


def layer_times(trt: Any, report: Any) -> Any:
    """An ``IProfiler`` of module ``trt`` that hands each (layer name, ms) to ``report``."""

    class LayerTimes(trt.IProfiler):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            report(str(layer_name), float(ms))

    return LayerTimes()


def profile_runner(trt: Any, runner: Any, feeds: Feeds, *, route: str, warmup: int = 3,
                   runs: int = 10) -> LayerProfile:
    """The layer profile of a freshly loaded ``TensorRTRunner``; the runner is closed afterwards."""
    per_run: list[list[tuple[str, str, str, float]]] = [[]]
    profiler = layer_times(trt, lambda name, ms: per_run[-1].append((name, layer_op(name), "gpu", ms)))
    try:
        details = layer_details(runner.engine_information())
        walls = runner.profile_runs(feeds, profiler, warmup, runs, after_run=lambda: per_run.append([]))
    finally:
        runner.close()
    done = [[(name, *details.get(name, (op, where)), ms) for name, op, where, ms in run] for run in per_run if run]
    note = "" if details else ("layer names and times only: build with settings profiling_verbosity: detailed "
                               "for each layer's type and tactic")
    return LayerProfile("tensorrt", route, len(done), statistics.median(walls) if walls else None,
                        median_layers(done), note=note)


def layer_details(information: str) -> dict[str, tuple[str, str]]:
    """Layer name -> (layer type, "gpu: tactic") from the engine inspector's JSON; {} for an engine built below
    DETAILED profiling verbosity (its layers are bare names) or an inspector that says nothing."""
    try:
        layers = json.loads(information or "{}").get("Layers", [])
    except (ValueError, AttributeError):
        return {}
    out = {}
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and layer.get("Name"):
            tactic = layer.get("TacticName") or layer.get("TacticValue") or "?"
            out[str(layer["Name"])] = (str(layer.get("LayerType") or "?"), f"gpu: {tactic}")
    return out
