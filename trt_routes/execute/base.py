"""What apply needs from an executor: run one task now, or keep several in flight and take results
back in whatever order they finish. The coordinator alone writes the cache; executors only return.

A task names its target through ``task.spec.target`` (the manifest's target as data: ``target``,
``kind``, and ``device``, the matched device's signature fields); executors run it only on hardware
whose device has exactly those fields (local slots) or that offers the target's resource (Ray)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from trt_routes.execute.tasks import TaskResult

Target = Mapping[str, Any]


@dataclass(frozen=True)
class ExecutionConfig:
    """Where and how trials run: the manifest's ``execution`` with apply's overrides (see ``config``)."""

    executor: str = "local"
    workers: int | None = None
    address: str | None = None
    cpus_per_trial: int = 1
    max_retries: int = 2


def task_target(task: Any) -> dict[str, Any]:
    """The target a task must run on (its BuildSpec's ``target``), ``{}`` for anywhere."""
    spec = getattr(task, "spec", None)
    target = getattr(spec, "target", None) or {}
    return dict(target) if isinstance(target, Mapping) else {}


def target_device(target: Target | None) -> dict[str, str] | None:
    """The device fields in a target (None: any device)."""
    device = (target or {}).get("device")
    return dict(device) if device else None


@runtime_checkable
class Executor(Protocol):
    """Runs isolated tasks. ``run`` blocks; ``submit``/``wait`` keep up to ``free_slots`` in flight."""

    def run(self, task: Any, timeout: float) -> TaskResult:
        """Run one task and return its result (used for references and side-by-side re-measurements)."""
        ...

    def free_slots(self, target: Target | None) -> int:
        """How many more tasks for ``target`` can start right now (0 when every matching slot is busy)."""
        ...

    def queue_room(self, target: Target | None) -> int:
        """How many more tasks for ``target`` may wait behind running ones, started by their worker the
        moment it is free (apply queues there only routes its search will want whatever comes back)."""
        ...

    def submit(self, task: Any, timeout: float) -> int:
        """Start ``task`` on a free slot (or queue it where ``queue_room`` allows); returns a ticket."""
        ...

    def warm(self, tasks: list[Any]) -> None:
        """Start, now, the workers these warm-up tasks' targets will need, and run each task in them, so
        their start-up overlaps other work (a no-op where there is nothing to overlap)."""
        ...

    def wait(self) -> tuple[int, TaskResult]:
        """Block until some submitted task finishes; (its ticket, its result)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...


class InFlightRun:
    """``run`` for executors that keep several tasks in flight (``submit``/``wait``): wait for room,
    submit, and keep the results of other tasks that finish meanwhile for a later ``wait``."""

    _done: dict[int, TaskResult]

    def _take(self) -> tuple[int, TaskResult]:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def _has_room(self, task: Any) -> bool:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def submit(self, task: Any, timeout: float) -> int:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def queue_room(self, target: Target | None) -> int:
        return 0  # tasks start on free slots only, unless an executor says otherwise

    def warm(self, tasks: list[Any]) -> None:
        return  # workers start on their first task, unless an executor says otherwise

    def wait(self) -> tuple[int, TaskResult]:
        """The result of a task that finished while ``run`` waited for its own, else the next to finish."""
        if self._done:
            ticket = next(iter(self._done))
            return ticket, self._done.pop(ticket)
        return self._take()

    def run(self, task: Any, timeout: float) -> TaskResult:
        while not self._has_room(task):
            ticket, result = self._take()
            self._done[ticket] = result
        mine = self.submit(task, timeout)
        while True:
            ticket, result = self._take()
            if ticket == mine:
                return result
            self._done[ticket] = result
