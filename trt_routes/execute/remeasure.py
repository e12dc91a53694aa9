"""Side-by-side re-measurement in one worker: every engine loaded (once, or afresh for each turn: see
below), then timed slot by slot in the given interleaved order (A B A C A ...), so drift and neighbours'
load hit every route alike.

With ``task.stopping`` the schedule is sequential (``trt_routes.selection.confirm.run_sequential``): a
challenger leaves the rotation once decided, and the task ends when all are.

A backend whose loaded engines keep taking CPU after their runs (``Backend.reload_each_turn``: ONNX Runtime's
intra-op threads spin on) would have the engines slow each other when kept loaded side by side: each turn then
loads its engine afresh, warms it up (``RELOAD_WARMUP`` runs) and releases it, so one engine is loaded while
it is timed, as in its trial. The engines are loaded once first all the same, for their warm-up until settled
and the turns' sizing.

Returns the slot medians in order (``meta["slots"]``) with the noise context; see ``trt_routes.selection.confirm``."""

from __future__ import annotations

__all__ = ["RELOAD_WARMUP", "run_remeasure"]

import statistics
import time
from pathlib import Path
from typing import Any

from trt_routes.backends import registry
from trt_routes.evidence import TrialStatus
from trt_routes.execute.protocol import NoiseContext, settle
from trt_routes.execute.tasks import RemeasureTask, TaskResult
from trt_routes.files.artifacts import BlobStore
from trt_routes.selection.confirm import TURNS_RELOAD
from trt_routes.selection.sequential import PILOT_RUNS, run_sequential, turn_runs, turn_size, turn_value

#: Untimed runs of an engine loaded afresh for its turn (``Backend.reload_each_turn``) before the timed ones:
#: its first run allocates; on the quickstart's models one run was enough for the turn to time as a kept
#: session's (ratios of equal routes 0.995-1.005).
RELOAD_WARMUP = 2


def _warm_and_size(task: RemeasureTask, runners: dict[str, Any], feeds: Any) -> tuple[dict[str, Any], int]:
    """Each engine's warm-up (fixed, then until settled), then the turns' runs: ``task.iterations``, or sized
    from a pilot of the baseline's (``confirm.turn_size``). No runner outlives this call but in ``runners``."""
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
    return warm, iterations


def run_remeasure(task: RemeasureTask) -> TaskResult:
    store = BlobStore(Path(task.store_root))
    backend = registry.get(task.backend)
    feeds = store.get_arrays(task.inputs_sha)
    t0 = time.perf_counter()
    runners = {}
    engines = {}
    for route, spec, sha in task.engines:
        if not store.has(sha):
            return TaskResult(status=TrialStatus.CRASHED,
                              error=f"engine {sha[:12]} of route '{route}' is not in the store")
        engines[route] = (store.path(sha), spec)
        runners[route] = backend.load(store.path(sha), spec)
    noise = NoiseContext(task.spec.target)
    warm, iterations = _warm_and_size(task, runners, feeds)
    slots: list[list[Any]] = []
    samples: dict[str, list[float]] = {route: [] for route in runners}
    fresh = backend.reload_each_turn
    if fresh:
        runners.clear()  # released before the first turn: each turn loads its own

    def turn(route: str, _round: int = 0) -> float:
        if fresh:
            got = backend.load(*engines[route]).time(feeds, RELOAD_WARMUP, iterations, 1)  # released on return
        else:
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
    meta: dict[str, Any] = {"slots": slots, "slot_iterations": iterations, "warmup": warm,
                            **(noise.finish() if backend.host_timed else {})}
    if fresh:
        meta["turns"] = TURNS_RELOAD
    if task.keep_samples:
        meta["samples"] = samples
    return TaskResult(status=TrialStatus.OK, meta=meta, measure_s=time.perf_counter() - t0)
