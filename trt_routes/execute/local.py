"""Local executor: a reusable worker process per slot, a time limit per task, replacement on failure.

A worker that dies (segfault, abort, os._exit) or overruns its time limit is killed and replaced;
its task becomes a trial with status ``crashed`` or ``timeout`` and the run goes on."""

from __future__ import annotations

__all__ = ["LocalExecutor", "Worker"]

from collections import deque
from collections.abc import Mapping
from multiprocessing.reduction import ForkingPickler
from typing import Any

from trt_routes.evidence import TrialStatus
from trt_routes.execute.base import InFlightRun, Target
from trt_routes.execute.spawn import Worker
from trt_routes.execute.tasks import TaskResult

#: The largest task queued in a worker's pipe behind a running one.
_QUEUED_TASK_MAX_BYTES = 16 * 1024


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
            _ticket, task, _timeout = self._waiting[0]
            data = ForkingPickler.dumps(task)
            if self._piped and len(data) > _QUEUED_TASK_MAX_BYTES:
                return
            if self._worker is not None and not self._piped and not self._worker.alive():
                self._worker.kill()  # it died idle, after its last result: the next task is not to blame
                self._worker = None
            if self._worker is None:
                self._worker = Worker(self.env, self.cpus)
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
            self._worker.kill() if result.status in (TrialStatus.TIMEOUT, TrialStatus.CRASHED) else self._worker.close()
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
