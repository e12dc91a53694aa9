"""The worker process: runs tasks it receives over a pipe until the pipe closes.

Imports backends lazily, so one worker serves many trials of one backend without re-importing.
Anything that goes wrong inside a task becomes a TaskResult; only a crash of the process itself
(a signal, a hard exit) is seen by the coordinator as a dead worker.

A worker dies with its coordinator: the kernel sends it SIGKILL when the coordinator goes (Linux's
parent-death signal), and a watchdog thread exits it when its parent pid changes (everywhere)."""

from __future__ import annotations

__all__ = ["InfrastructureFailure", "die_with_parent", "make_inputs", "own_files", "point_inputs", "profile_points",
           "run_reference", "run_trial", "serve"]

import contextlib
import ctypes
import errno
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from trt_routes.backends import registry
from trt_routes.backends.base import Backend
from trt_routes.backends.meters import EnergyMeter, MemoryMeter
from trt_routes.backends.native_log import captured_fd2
from trt_routes.errors import StorageError, storage_error
from trt_routes.evidence import TrialStatus, facts, measure
from trt_routes.evidence.inputs import DTYPES, STDERR_HEADER, make_inputs
from trt_routes.execute.protocol import NoiseContext, timed_samples
from trt_routes.execute.remeasure import run_remeasure
from trt_routes.execute.tasks import (
    ReferenceTask,
    RemeasureTask,
    TaskResult,
    TrialTask,
    WarmupTask,
    healthy,
)
from trt_routes.files.artifacts import BlobStore


class InfrastructureFailure(Exception):
    """Our own file handling failed (the store, the scratch folder): the machine's fault, not the route's."""


@contextmanager
def own_files(what: str) -> Iterator[None]:
    """Turn an OSError of trt-routes' own file handling (``what``) into an InfrastructureFailure (a refused
    write is already a StorageError, which the worker classifies the same way)."""
    try:
        yield
    except OSError as exc:
        raise InfrastructureFailure(f"{what}: {_one_line(exc)}") from exc


def run_reference(task: ReferenceTask) -> TaskResult:
    store = BlobStore(Path(task.store_root))
    backend = registry.get(task.backend)
    with own_files("reading the given reference inputs"):
        given = store.get_arrays(task.given_inputs_sha) if task.given_inputs_sha else None
    feeds = given if given is not None else make_inputs(task.inputs, task.seed)
    outputs = backend.reference(task.spec, feeds)
    bad = measure.all_finite(outputs)
    if bad:
        return TaskResult(status=TrialStatus.ACCURACY_FAILED,
                          error=f"the reference itself has non-finite values in output(s) {', '.join(bad)}")
    with own_files("storing the reference"):
        return TaskResult(status=TrialStatus.OK, inputs_sha256=store.put_arrays(feeds),
                          outputs_sha256=store.put_arrays(outputs))


#: Free bytes under which a build error is put down to the full disk: compilers rarely say ENOSPC (ONNX Runtime
#: says "Protobuf serialization failed"), and such a failure must not be cached as a fact about the route.
DISK_FULL_BYTES = 4 << 20


def _disk_full(engine: Path, exc: BaseException) -> StorageError | None:
    try:
        free = shutil.disk_usage(engine.parent).free
    except OSError:
        return None
    if free >= DISK_FULL_BYTES:
        return None
    return StorageError(f"cannot build in {engine.parent}: no space left on the device ({free} bytes free; the "
                        f"build said: {_one_line(exc)})", "free space there, or point paths.cache and paths.engines "
                        "in tuning.yaml at a larger disk", errno_=errno.ENOSPC, path=str(engine.parent))


def run_trial(task: TrialTask) -> TaskResult:
    """Build, check and time one route. The worker's scratch folder is emptied by ``serve`` after the
    result has been sent, so the coordinator's bookkeeping overlaps that cleanup."""
    store = BlobStore(Path(task.store_root))
    backend = registry.get(task.backend)
    with own_files("creating the worker's scratch folder"):
        engine_tmp = _scratch(task.spec.work_dir, store) / f"engine{backend.engine_suffix_for(task.spec.settings)}"
    t0 = time.perf_counter()
    try:
        log = backend.build(task.spec, engine_tmp)
    except Exception as exc:  # a build error is a fact about the route, not a crash
        full = storage_error(exc, engine_tmp) or _disk_full(engine_tmp, exc)
        if full is not None:  # ...unless the disk refused our write: a fact about this machine
            raise full from exc
        return TaskResult(status=TrialStatus.BUILD_ERROR, error=_one_line(exc), log=traceback.format_exc(limit=3),
                          build_s=time.perf_counter() - t0)
    build_s = time.perf_counter() - t0
    if not engine_tmp.is_file():
        return TaskResult(status=TrialStatus.BUILD_ERROR, error=f"the {task.backend} build wrote no engine", log=log,
                          build_s=build_s)
    engine_bytes = _size(engine_tmp)
    with own_files("storing the engine"):
        engine_sha = store.put_file(engine_tmp, move=True)
    t1 = time.perf_counter()
    noise = NoiseContext(task.spec.target)
    result = _check_and_time(task, backend, store, store.path(engine_sha))
    result.log, result.build_s, result.engine_sha256 = log, build_s, engine_sha
    result.measure_s = time.perf_counter() - t1  # load, check, time and release the engine
    if backend.host_timed:
        result.meta.update(noise.finish(judge=task.judge_busy))
    if result.samples:
        stored = result.meta.setdefault("facts", {})
        stored["build_s"] = build_s
        if engine_bytes is not None:
            stored.setdefault("engine_mb", engine_bytes / 1e6)
    if not all(math.isfinite(s) for s in result.samples):  # summarized by the coordinator, which needs numbers
        result.status, result.error = TrialStatus.CRASHED, "the backend returned unusable timings (NaN or Inf samples)"
    return result


def _check_and_time(task: TrialTask, backend: Backend, store: BlobStore, engine: Path) -> TaskResult:
    """Load the engine, compare its outputs with the reference, time it. The runner is released on
    return, so its teardown (a session's thread pool) is over before the worker takes its readings."""
    with own_files("reading the reference inputs"):
        feeds = store.get_arrays(task.inputs_sha)
        reference = store.get_arrays(task.reference_sha)
    memory = MemoryMeter(task.spec.target)
    runner = backend.load(engine, task.spec)
    outputs = runner.run(feeds)
    with own_files("storing the outputs"):
        result = TaskResult(status=TrialStatus.OK, outputs_sha256=store.put_arrays(outputs))
    result.losses = measure.losses(outputs, reference, task.l0_params)
    bad = measure.all_finite(outputs)
    if bad:  # still timed: the engine runs, and its time tells a search about the other values it changes
        result.status, result.error = TrialStatus.ACCURACY_FAILED, f"non-finite values in output(s) {', '.join(bad)}"
    elif points := profile_points(task.spec.profile):
        failed = _check_points(task, backend, runner, feeds, points, result)
        if failed:  # not timed: a run at another point may have left the engine unusable
            result.status, result.error = TrialStatus.ACCURACY_FAILED, failed
            return result
    energy = EnergyMeter(task.spec.target)
    try:
        result.samples, meta = timed_samples(runner, feeds, task.warmup, task.iterations, task.repeats, task.settle)
    except Exception:
        if result.status == TrialStatus.OK:
            raise
        return result  # a failed route's time only helps the search: one that cannot be timed (a replayed route
        # recorded without samples) stays untimed
    result.meta.update(meta)
    if result.status == TrialStatus.OK:
        result.meta["facts"] = _facts(task, runner, result, energy, memory, _size(engine))
    return result


def _facts(task: TrialTask, runner: object, result: TaskResult, energy: EnergyMeter,
           memory: MemoryMeter, engine_bytes: int | None = None) -> dict[str, object]:
    """The trial's facts beside its samples (``trt_routes.evidence.facts``); the runner's own accounting
    (``runner.facts()``, e.g. a replayed landscape's) replaces what the worker measured. Energy counts
    every run of the engine since the fixed warm-up (warm-up, settle and timed runs) times the batch."""
    batch = facts.batch_of(task.spec.inputs)
    runs = (task.warmup + 1 if task.warmup else 0) + int(result.meta.get("settle_runs", 0)) + len(result.samples)
    out: dict[str, object] = {**facts.latency_facts(result.samples), "batch": batch}
    out.update(energy.finish(runs * batch))
    out.update(memory.finish(engine_bytes))
    own = getattr(runner, "facts", None)
    if callable(own):
        out.update(own())
    if out.get("latency.p50"):
        out["throughput"] = batch / (float(out["latency.p50"]) / 1000.0)  # type: ignore[arg-type]
    return out


def _size(path: Path) -> int | None:
    """Bytes of an engine file, or of every file in an engine folder; None if it is gone."""
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError:
        return None


def profile_points(profile: dict[str, dict[str, list[int]]]) -> list[str]:
    """The points of a dynamic shape profile checked besides ``opt`` (timing uses ``opt`` only)."""
    return [p for p in ("min", "max") if any(dims[p] != dims["opt"] for dims in profile.values())]


def point_inputs(task: TrialTask, feeds: dict[str, np.ndarray], point: str) -> dict[str, np.ndarray]:
    """Seeded inputs at a profile point: each input's manifest spec (dtype, range) where it matches the
    reference inputs' dtype, else the dtype and value range of those inputs (reference files)."""
    specs: dict[str, dict[str, object]] = {}
    for name, dims in task.spec.profile.items():
        given = dict(task.spec.inputs.get(name) or {})
        opt = feeds.get(name)
        if opt is not None and str(opt.dtype) != str(given.get("dtype", "float32")) and str(opt.dtype) in DTYPES:
            finite = opt[np.isfinite(opt)] if np.issubdtype(opt.dtype, np.floating) else opt
            lo = float(finite.min()) if finite.size else 0.0
            hi = float(finite.max()) if finite.size else 1.0
            given = {"dtype": str(opt.dtype), "low": lo, "high": hi + 1 if np.issubdtype(opt.dtype, np.integer) else hi}
        specs[name] = {**given, "shape": dims[point]}
    return make_inputs(specs, task.seed + 1 + ("min", "max").index(point))


def _check_points(task: TrialTask, backend: Backend, runner: object, feeds: dict[str, np.ndarray],
                  points: list[str], result: TaskResult) -> str:
    """Gate the engine at the profile's other points too: each loss becomes the worst over min, opt and max,
    and ``meta["loss_points"]`` names the point of every loss that is not opt's. Returns why it failed."""
    worst_at: dict[str, dict[str, str]] = {}
    for point in points:
        pfeeds = point_inputs(task, feeds, point)
        shapes = ", ".join(f"{n} {list(a.shape)}" for n, a in sorted(pfeeds.items()))
        reference = backend.reference(task.spec, pfeeds)
        if measure.all_finite(reference):
            return f"the reference has non-finite values at the profile's {point} ({shapes})"
        try:
            outputs = runner.run(pfeeds)  # type: ignore[attr-defined]
        except Exception as exc:
            return f"the engine failed to run at the profile's {point} ({shapes}): {_one_line(exc)}"
        bad = measure.all_finite(outputs)
        if bad:
            return f"non-finite values in output(s) {', '.join(bad)} at the profile's {point} ({shapes})"
        for output, per in measure.losses(outputs, reference, task.l0_params).items():
            mine = result.losses.setdefault(output, {})
            for key, value in per.items():
                if key not in mine or value > mine[key]:
                    mine[key] = value
                    worst_at.setdefault(output, {})[key] = point
    result.meta["profile_points"] = ["min", "opt", "max"]
    if worst_at:
        result.meta["loss_points"] = worst_at
    return ""


def _empty_scratch() -> None:
    """One scratch folder per worker and store, emptied after each task. A folder may be gone already:
    on a Ray node the store lives in the task's staging folder, which the node removes as soon as the
    result is back, racing this (a worker that died here took the next task down with it)."""
    for key, folder in list(_SCRATCH.items()):
        try:
            leftovers = list(folder.iterdir())
        except FileNotFoundError:
            del _SCRATCH[key]  # its task's folder went with the task: nothing to empty, nothing to keep
            continue
        for leftover in leftovers:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink()


_SCRATCH: dict[str, Path] = {}


def _scratch(parent: str, store: BlobStore) -> Path:
    """The task's ``work_dir`` when it names one, else a folder under the blob store (``store.make_scratch``:
    on its file system, so the engine is renamed into the store, never copied across devices)."""
    key = parent or f"store:{store.root}"
    if key not in _SCRATCH:
        _SCRATCH[key] = (Path(tempfile.mkdtemp(prefix="trt-routes-worker-", dir=parent)) if parent
                         else store.make_scratch())
    return _SCRATCH[key]


_PR_SET_PDEATHSIG = 1
_WATCH_S = 0.5


def die_with_parent(expected: int) -> None:
    """Exit when the coordinator (pid ``expected``) does: PR_SET_PDEATHSIG (SIGKILL from the kernel, Linux) and a
    watchdog thread that exits when the parent pid changes (the coordinator died and we were re-parented)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # no prctl: the watchdog alone
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != expected:  # the coordinator died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == expected:
            time.sleep(_WATCH_S)
        for folder in list(_SCRATCH.values()):
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, name="trt-routes-parent-watch", daemon=True).start()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not text.startswith(type(exc).__name__) else text


def serve(conn: Connection, parent: int | None = None) -> None:
    """Worker main loop: runs the tasks that arrive on ``conn`` until it closes, ``None`` arrives, or a
    task fails (the coordinator replaces a worker after any failure, and a task queued behind the
    failure goes to the replacement). ``parent``: the coordinator's pid, for a worker process of its own
    (``spawn.child_main``), which exits when the coordinator does, and after an orderly stop leaves without
    the interpreter's teardown."""
    die_with_parent(parent if parent is not None else os.getppid())
    stopped = False
    try:
        while True:
            try:
                task = conn.recv()
            except (EOFError, OSError):
                return  # the coordinator is gone: exit quietly
            except Exception as exc:  # a task this process cannot rebuild (a class only the coordinator's
                # script defines, in its __main__): the task's answer, then a fresh worker for the next
                with contextlib.suppress(BrokenPipeError, OSError):
                    conn.send(TaskResult(status=TrialStatus.CRASHED, error=f"infrastructure: the worker could not read "
                                         f"its task: {_one_line(exc)}", infrastructure=True))
                return
            if task is None:
                stopped = True
                return
            result = _run(task)
            try:
                conn.send(result)
            except (BrokenPipeError, OSError):
                return
            if not healthy(result):
                return
            _empty_scratch()  # after sending: the coordinator's bookkeeping overlaps it
    finally:
        for folder in _SCRATCH.values():
            shutil.rmtree(folder, ignore_errors=True)
        if stopped and parent is not None:
            # an orderly stop in a worker process: nothing is left to write (results went back, scratch is
            # gone), so skip the interpreter's teardown of the backend (hundreds of ms that the coordinator
            # would wait for in ``Worker.close``)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


#: The line that starts what a task's native code wrote to file descriptor 2, at the end of its log.
def _run(task: object) -> TaskResult:
    with captured_fd2() as captured:
        result = _dispatch(task)
    if captured:
        result.log = "\n".join(x for x in (result.log.rstrip(), STDERR_HEADER, *captured) if x)
    return result


def _dispatch(task: object) -> TaskResult:
    started = time.perf_counter()
    try:
        if isinstance(task, TrialTask):
            result = run_trial(task)
        elif isinstance(task, ReferenceTask):
            result = run_reference(task)
        elif isinstance(task, RemeasureTask):
            result = run_remeasure(task)
        elif isinstance(task, WarmupTask):
            registry.get(task.backend).warm_up(task.spec)
            result = TaskResult(status=TrialStatus.OK)
        elif callable(getattr(task, "execute", None)):  # self-describing tasks (probes, wrappers)
            result = task.execute()  # type: ignore[attr-defined]
        else:
            result = TaskResult(status=TrialStatus.CRASHED, error=f"unknown task {type(task).__name__}")
    except (InfrastructureFailure, StorageError) as exc:  # the machine's failure: not cached as the route's
        result = TaskResult(status=TrialStatus.CRASHED, error=f"infrastructure: {exc}", log=traceback.format_exc(),
                            infrastructure=True)
    except Exception as exc:
        result = TaskResult(status=TrialStatus.CRASHED, error=_one_line(exc), log=traceback.format_exc())
    result.meta["worker_s"] = time.perf_counter() - started  # task wall time inside the worker
    return result
