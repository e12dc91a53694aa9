"""Side-by-side re-measurement in one worker: every engine loaded once, then timed slot by slot in the
given interleaved order (A B A C A ...), so drift and neighbours' load hit every route alike.

With ``task.stopping`` the schedule is sequential (``trt_routes.selection.confirm.run_sequential``): a
challenger leaves the rotation once decided, and the task ends when all are.

Returns the slot medians in order (``meta["slots"]``) with the noise context; see ``trt_routes.selection.confirm``."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from trt_routes.artifacts import BlobStore
from trt_routes.backends import registry
from trt_routes.execute.protocol import NoiseContext, settle
from trt_routes.execute.tasks import RemeasureTask, TaskResult
from trt_routes.selection.confirm import PILOT_RUNS, run_sequential, turn_runs, turn_size, turn_value


def run_remeasure(task: RemeasureTask) -> TaskResult:
    store = BlobStore(Path(task.store_root))
    backend = registry.get(task.backend)
    feeds = store.get_arrays(task.inputs_sha)
    t0 = time.perf_counter()
    runners = {}
    for route, spec, sha in task.engines:
        if not store.has(sha):
            return TaskResult(status="crashed", error=f"engine {sha[:12]} of route '{route}' is not in the store")
        runners[route] = backend.load(store.path(sha), spec)
    noise = NoiseContext(task.spec.target)
    warm: dict[str, Any] = {}
    for route, runner in runners.items():
        if task.warmup:
            runner.time(feeds, task.warmup, 1, 1)
        warm[route] = settle(lambda n, r=runner: r.time(feeds, 0, n, 1), task.settle)  # type: ignore[misc]
    iterations = turn_runs(task.statistic, task.iterations)
    if task.slot_ms > 0 or task.turn_target > 0:
        first = runners[task.engines[0][0]]
        pilot = first.time(feeds, 0, 5, 1)
        if task.turn_target > 0 and task.turn_spread is None and \
                statistics.median(pilot) * PILOT_RUNS <= max(task.max_slot_ms, 1e-9):
            pilot += first.time(feeds, 0, PILOT_RUNS - 5, 1)  # enough runs to see the spread, cheaply
        iterations = turn_size(pilot, iterations, task.slot_ms, task.max_slot_ms, task.turn_target,
                               task.turn_spread)
    slots: list[list[Any]] = []
    samples: dict[str, list[float]] = {route: [] for route in runners}

    def turn(route: str, _round: int = 0) -> float:
        got = runners[route].time(feeds, 0, iterations, 1)
        slots.append([route, float(f"{turn_value(got, task.statistic):.6g}")])
        if task.keep_samples:
            samples[route] += [float(f"{s:.6g}") for s in got]
        return float(slots[-1][1])

    if task.stopping is not None:
        names = [route for route, _, _ in task.engines]
        run_sequential(names[0], names[1:], task.stopping, turn)
    else:
        for route in task.order:
            turn(route)
    meta: dict[str, Any] = {"slots": slots, "slot_iterations": iterations, "warmup": warm, **noise.finish()}
    if task.keep_samples:
        meta["samples"] = samples
    return TaskResult(status="ok", meta=meta, measure_s=time.perf_counter() - t0)
