"""Local executor: a reusable worker process per slot, a time limit per task, replacement on failure.

A worker that dies (segfault, abort, os._exit) or overruns its time limit is killed and replaced;
its task becomes a trial with status ``crashed`` or ``timeout`` and the run goes on."""

from __future__ import annotations

__all__ = ["LocalExecutor", "early_worker"]

import contextlib
import multiprocessing as mp
import os
import signal
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from typing import Any

from trt_routes.execute.base import InFlightRun, Target
from trt_routes.execute.tasks import TaskResult, healthy
from trt_routes.execute.worker import serve

#: Set in every worker unless the user's environment sets it. A worker's own numpy work (inputs, losses)
#: is small, and OpenBLAS's idle pool threads spin for a while after each call: without this, the loss
#: computation on a large output left a thread burning a core through the timed runs that follow.
WORKER_ENV_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1"}

#: The largest task queued in a worker's pipe behind a running one.
_QUEUED_TASK_MAX_BYTES = 16 * 1024

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
        self.start_error = ""  # the worker could not be started (the machine's failure, not a task's)
        try:
            with _spawn_context(env, cpus):
                self.proc.start()
        except OSError as exc:
            self.start_error = f"{type(exc).__name__}: {exc}"
        child.close()

    def alive(self) -> bool:
        """False once the process has exited (a worker that never started counts as alive: ``receive``
        reports why it could not start)."""
        return bool(self.start_error) or self.proc.is_alive()

    def send_bytes(self, data: bytes | memoryview) -> bool:
        """Put a pickled task in the worker's pipe (it runs after those already there); False if the worker
        is gone (``receive`` then says how it died)."""
        try:
            self.conn.send_bytes(data)
        except (BrokenPipeError, OSError):
            return False
        return True

    def receive(self, timeout: float) -> tuple[TaskResult, bool]:
        """The result of the oldest task in the pipe, within ``timeout``; (result, worker_still_healthy)."""
        if self.start_error:
            return TaskResult(status="crashed", error=f"infrastructure: could not start a worker process: "
                              f"{self.start_error}", infrastructure=True), False
        if not self.conn.poll(timeout):
            self.kill()
            return TaskResult(status="timeout", error=f"no result within the {timeout:g} s time limit"), False
        try:
            result: TaskResult = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            return TaskResult(status="crashed",
                              error=f"worker died with {_signal_name(self.proc.exitcode)}"), False
        return result, healthy(result)

    def kill(self) -> None:
        if self.start_error:
            self.conn.close()
            return
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def close(self) -> None:
        if self.start_error:
            self.conn.close()
            return
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send(None)
        self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(2)
        self.conn.close()


#: The worker ``early_worker`` started, with the environment variables it was started under (at most one).
_EARLY: list[tuple[dict[str, str], Worker]] = []


@contextlib.contextmanager
def early_worker(enabled: bool = True) -> Iterator[None]:
    """Start the default local worker now, while the caller loads the project and plans: its interpreter
    and imports (~0.16 s) overlap the coordinator's own. The first LocalExecutor that would start an
    identical worker (no extra environment, no pinned cores, the same environment variables) takes it; one
    nobody took is stopped on exit (a no-op apply: a few milliseconds here, its start-up on another core)."""
    if not enabled or _EARLY:
        yield
        return
    _EARLY.append((dict(os.environ), Worker()))
    try:
        yield
    finally:
        while _EARLY:
            _EARLY.pop()[1].kill()  # never given a task: nothing of it to keep


def _take_early(env: Mapping[str, str], cpus: frozenset[int] | None) -> Worker | None:
    if not _EARLY:
        return None
    environ, worker = _EARLY.pop()
    if env or cpus is not None or environ != dict(os.environ) or not worker.alive() or worker.start_error:
        worker.kill()  # started for another configuration, and never given a task
        return None
    return worker


class LocalExecutor(InFlightRun):
    """Runs tasks one at a time in a reused worker; replaces the worker after any failure.

    ``env`` and ``cpus`` shape every worker it starts (a GPU pinned with CUDA_VISIBLE_DEVICES, a
    bounded thread count, a set of cores).

    Besides the running task, one more may wait in the worker's pipe (``queue_room``): the worker
    starts it the moment it has sent the previous result, instead of idling while the coordinator
    records that result and picks what comes next. A worker that reports a failure exits before
    reading on (``serve``), and the task queued behind it goes to its replacement."""

    def __init__(self, env: Mapping[str, str] | None = None, cpus: frozenset[int] | None = None) -> None:
        self._worker: Worker | None = None
        self.workers_started = 0
        self.env = dict(env or {})
        self.cpus = cpus
        self._waiting: deque[tuple[int, Any, float]] = deque()  # submitted, not in the pipe yet
        self._piped: deque[tuple[int, Any, float]] = deque()  # in the worker's pipe, in order: the first runs
        self._done: dict[int, TaskResult] = {}
        self._tickets = 0

    def free_slots(self, target: Target | None) -> int:
        return 0 if self._waiting or self._piped else 1

    def queue_room(self, target: Target | None) -> int:
        return 1 if len(self._waiting) + len(self._piped) == 1 else 0

    def submit(self, task: Any, timeout: float) -> int:
        self._tickets += 1
        self._waiting.append((self._tickets, task, timeout))
        self._feed()
        return self._tickets

    def _feed(self) -> None:
        """Move waiting tasks into the pipe: the first always, one more behind it when it is small (a
        pipe holds 64 KiB: a larger task queued behind a large result could block both ends)."""
        while self._waiting and len(self._piped) < 2:
            data = ForkingPickler.dumps(self._waiting[0][1])
            if self._piped and len(data) > _QUEUED_TASK_MAX_BYTES:
                return
            if self._worker is not None and not self._piped and not self._worker.alive():
                self._worker.kill()  # it died idle, after its last result: the next task is not to blame
                self._worker = None
            if self._worker is None:
                self._worker = _take_early(self.env, self.cpus) or Worker(self.env, self.cpus)
                self.workers_started += 1
            self._piped.append(self._waiting.popleft())
            if not self._worker.send_bytes(data):
                return  # the worker is gone: receiving the first task's result says how

    def _take(self) -> tuple[int, TaskResult]:
        if not self._piped:
            if not self._waiting:
                raise RuntimeError("wait() with nothing submitted")
            self._feed()
        assert self._worker is not None
        ticket, _task, timeout = self._piped[0]
        result, ok = self._worker.receive(timeout)
        self._piped.popleft()
        if not ok:
            self._worker.kill() if result.status in ("timeout", "crashed") else self._worker.close()
            self._worker = None
            self._waiting.extendleft(reversed(self._piped))  # never started: the next worker runs them
            self._piped.clear()
        self._feed()
        return ticket, result

    def _has_room(self, task: Any) -> bool:
        return True  # submit always queues

    def close(self) -> None:
        if self._worker is not None:
            self._worker.kill() if self._piped else self._worker.close()  # interrupted mid-task: do not wait
            self._worker = None
        self._waiting.clear()
        self._piped.clear()

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
