"""ONNX Runtime's own profiler as a layer profile (``Backend.profile`` of both ONNX Runtime backends).

A session is made for the profile alone (``SessionOptions.enable_profiling``), with the route's options, so no
timed run is ever profiled. Its trace (Chrome trace JSON) holds one ``model_run`` event per run and one
``<node>_kernel_time`` event per node per run (its ``op_name`` and ``provider`` in ``args``, ``dur`` in
microseconds). The first ``warmup`` runs are dropped. On the CUDA provider a node's time is what the host
spends launching it, not the GPU's: explain's sums check then says the layers do not add up to the trial."""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trt_routes.backends.base import Feeds
from trt_routes.evidence.layers import LayerProfile, median_layers


def profile_session(make: Callable[[Any], Any], options: Any, feeds: Feeds, *, backend: str, route: str,
                    warmup: int = 3, runs: int = 10) -> LayerProfile:
    """``make(options)`` -> an InferenceSession; ``options`` gets the profiler turned on, into a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="trt-routes-profile-") as scratch:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(scratch) / "ort")
        session = make(options)
        names = [o.name for o in session.get_outputs()]
        types = {i.name: i.type for i in session.get_inputs()}
        from trt_routes.backends.onnxruntime import _NP_TYPES, _cast_feeds

        prepared = _cast_feeds(feeds, {n: _NP_TYPES.get(t) for n, t in types.items()})
        for _ in range(warmup + runs):
            session.run(names, prepared)
        trace = Path(session.end_profiling())
        events = json.loads(trace.read_text(encoding="utf-8"))
    return parse_trace(events, backend=backend, route=route, skip=warmup)


def parse_trace(events: list[dict[str, Any]], *, backend: str, route: str, skip: int = 0) -> LayerProfile:
    """A layer profile from an ORT trace: node events grouped into the ``model_run`` they fall in."""
    spans = sorted((int(e["ts"]), int(e["ts"]) + int(e["dur"])) for e in events
                   if e.get("cat") == "Session" and e.get("name") == "model_run")[skip:]
    per_run: list[list[tuple[str, str, str, float]]] = [[] for _ in spans]
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        ts, args = int(e["ts"]), e.get("args") or {}
        for i, (start, end) in enumerate(spans):
            if start <= ts <= end:
                per_run[i].append((name.removesuffix("_kernel_time"), str(args.get("op_name", "?")),
                                   str(args.get("provider", "?")), int(e["dur"]) / 1000.0))
                break
    wall = statistics.median((end - start) / 1000.0 for start, end in spans) if spans else None
    return LayerProfile(backend, route, len(spans), wall, median_layers([r for r in per_run if r]))
