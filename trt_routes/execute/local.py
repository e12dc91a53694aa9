"""Local executor: a reusable worker process per slot, a time limit per task, replacement on failure.

A worker that dies (segfault, abort, os._exit) or overruns its time limit is killed and replaced;
its task becomes a trial with status ``crashed`` or ``timeout`` and the run goes on."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from multiprocessing.process import BaseProcess

from trt_routes.execute.base import SerialDispatch
from trt_routes.execute.tasks import ReferenceTask, TaskResult, TrialTask
from trt_routes.execute.worker import serve

#: Set in every worker unless the user's environment sets it. A worker's own numpy work (inputs, losses)
#: is small, and OpenBLAS's idle pool threads spin for a while after each call: without this, the loss
#: computation on a large output left a thread burning a core through the timed runs that follow.
WORKER_ENV_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1"}

#: Spawning takes the environment and CPU affinity from the spawning thread: one spawn at a time.
_SPAWN_LOCK = threading.Lock()


@contextlib.contextmanager
def _spawn_context(env: Mapping[str, str], cpus: frozenset[int] | None) -> Iterator[None]:
    """``env`` set (and this thread pinned to ``cpus``) while a child is spawned, then restored.

    The child's environment is fixed at exec, before it imports numpy or any CUDA library, which is
    what CUDA_VISIBLE_DEVICES and the thread-count variables need; affinity is inherited at fork."""
    with _SPAWN_LOCK:
        saved = {k: os.environ.get(k) for k in env}
        saved_cpus = os.sched_getaffinity(0) if cpus and hasattr(os, "sched_setaffinity") else None
        os.environ.update(env)
        if saved_cpus is not None:
            os.sched_setaffinity(0, cpus)  # type: ignore[arg-type]
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if saved_cpus is not None:
                os.sched_setaffinity(0, saved_cpus)


def _signal_name(code: int | None) -> str:
    if code is None:
        return "unknown"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class Worker:
    """One isolated worker process (spawned, so no state leaks from the coordinator), started with
    ``env`` added to its environment and, given ``cpus``, bound to those CPU cores."""

    def __init__(self, env: Mapping[str, str] | None = None, cpus: frozenset[int] | None = None) -> None:
        ctx = mp.get_context("spawn")
        env = {**{k: v for k, v in WORKER_ENV_DEFAULTS.items() if k not in os.environ}, **(env or {})}
        self.conn, child = ctx.Pipe()
        self.proc: BaseProcess = ctx.Process(target=serve, args=(child,), daemon=True)
        with _spawn_context(env, cpus):
            self.proc.start()
        child.close()

    def run(self, task: TrialTask | ReferenceTask, timeout: float) -> tuple[TaskResult, bool]:
        """Run ``task``; returns (result, worker_still_healthy)."""
        try:
            self.conn.send(task)
        except (BrokenPipeError, OSError):
            self.proc.join(1)
            return TaskResult(status="crashed", error=f"worker died ({_signal_name(self.proc.exitcode)})"), False
        if not self.conn.poll(timeout):
            self.kill()
            return TaskResult(status="timeout", error=f"no result within the {timeout:g} s time limit"), False
        try:
            result: TaskResult = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            return TaskResult(status="crashed",
                              error=f"worker died with {_signal_name(self.proc.exitcode)}"), False
        return result, result.status in ("ok",)

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send(None)
        self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(2)
        self.conn.close()


class LocalExecutor(SerialDispatch):
    """Runs tasks one at a time in a reused worker; replaces the worker after any failure.

    ``env`` and ``cpus`` shape every worker it starts (a GPU pinned with CUDA_VISIBLE_DEVICES, a
    bounded thread count, a set of cores)."""

    def __init__(self, env: Mapping[str, str] | None = None, cpus: frozenset[int] | None = None) -> None:
        super().__init__()
        self._worker: Worker | None = None
        self.workers_started = 0
        self.env = dict(env or {})
        self.cpus = cpus

    def run(self, task: TrialTask | ReferenceTask, timeout: float) -> TaskResult:
        if self._worker is None:
            self._worker = Worker(self.env, self.cpus)
            self.workers_started += 1
        result, healthy = self._worker.run(task, timeout)
        if not healthy:
            self._worker.kill() if result.status in ("timeout", "crashed") else self._worker.close()
            self._worker = None
        return result

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
