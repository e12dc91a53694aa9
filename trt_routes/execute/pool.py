"""Local multi-device executor: one isolated worker per slot (a GPU, or a share of the CPU cores),
tasks dispatched to free slots whose device matches, results taken back as they finish.

Each slot is served by a thread that drives that slot's ``LocalExecutor`` (so a crashed or hung
worker is replaced exactly as with one worker); the coordinator thread does all bookkeeping and
all cache writes. GPU slots pin their worker with CUDA_VISIBLE_DEVICES; CPU slots (only when asked
for more than one) bind their worker to disjoint cores and bound its thread pools."""

from __future__ import annotations

__all__ = ["THREAD_VARS", "PoolExecutor", "Slot", "local_slots", "pin_gpu_slots"]

import contextlib
import os
import queue
import threading
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trt_routes.backends.base import SPARE_CPUS_VAR
from trt_routes.errors import UsageError
from trt_routes.evidence import TrialStatus
from trt_routes.execute.base import InFlightRun, Target, target_device, task_target
from trt_routes.execute.local import LocalExecutor
from trt_routes.execute.tasks import TaskResult
from trt_routes.signature import Environment

#: Thread-count variables set for a CPU worker bounded to N cores. TRT_ROUTES_CPU_THREADS is read by
#: backends whose own default is "as many threads as cores" (ONNX Runtime's intra-op pool).
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TRT_ROUTES_CPU_THREADS")


@dataclass(frozen=True)
class Slot:
    """Where one worker runs: its device's signature fields, environment and CPU cores."""

    name: str
    device: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    cpus: frozenset[int] | None = None

    def serves(self, device: Mapping[str, str] | None) -> bool:
        return device is None or dict(device) == self.device


def visible_gpu_ids(count: int) -> list[str]:
    """The CUDA_VISIBLE_DEVICES value that selects each of the ``count`` GPUs this process sees."""
    listed = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if "CUDA_VISIBLE_DEVICES" in os.environ and len(listed) >= count:
        return listed[:count]
    return [str(i) for i in range(count)]


def local_slots(env: Environment, workers: int | None = None, cpu_workers: int = 1) -> list[Slot]:
    """One slot per GPU (at most ``workers`` per kind of GPU), and ``cpu_workers`` CPU slots.

    ``env`` is the environment the jobs were resolved with (``Environment.cpu_shared`` when the CPU
    is split), so a slot's device fields equal those of the jobs it may run."""
    slots: list[Slot] = []
    per_kind: dict[str, int] = {}
    for index, (gpu, cuda_id) in enumerate(zip(env.gpus, visible_gpu_ids(len(env.gpus)), strict=True)):
        device = {"device": "gpu", **gpu}
        kind = repr(sorted(device.items()))
        if workers is not None and per_kind.get(kind, 0) >= workers:
            continue
        per_kind[kind] = per_kind.get(kind, 0) + 1
        slots.append(Slot(f"gpu{index}", device, {"CUDA_VISIBLE_DEVICES": cuda_id}))
    if len(slots) > 1:
        slots = pin_gpu_slots(slots)
    cpu_device = {"device": "cpu", **env.cpu}
    if cpu_workers <= 1:
        slots.append(Slot("cpu0", cpu_device))
        return slots
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    per = max(1, int(env.cpu.get("cpu_count", "1") or 1))
    for i in range(cpu_workers):
        mine = frozenset(cores[(i * per + j) % len(cores)] for j in range(per))
        slots.append(Slot(f"cpu{i}", cpu_device, {v: str(per) for v in THREAD_VARS}, mine))
    return slots


def pin_gpu_slots(slots: list[Slot]) -> list[Slot]:
    """GPU workers side by side get their own cores: the cores local to their GPU (its NUMA node, shared
    evenly by the GPUs of one node), else an even share of this process's cores, so one worker's timed
    runs never wait for another's work. Their compile pools (Inductor's) are sized to every core but run
    at the lowest priority (``SPARE_CPUS_VAR``, ``start_on_spare_cpus``): compilation, most of a trial,
    uses whatever cores the other workers leave idle, and yields at once to their timed runs."""
    from trt_routes.backends.cuda_device import gpu_local_cpus

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(allowed) < len(slots):
        return slots
    local = gpu_local_cpus([s.env.get("CUDA_VISIBLE_DEVICES", "") for s in slots])
    if any(cpus is None or len(cpus & set(allowed)) < local.count(cpus) for cpus in local):
        local = [frozenset(allowed)] * len(slots)  # not known for every GPU: even shares of all cores
    pinned = []
    for k, slot in enumerate(slots):
        mine = sorted(local[k] & set(allowed))  # type: ignore[operator]
        peers = [j for j in range(len(slots)) if local[j] == local[k]]
        share = mine[peers.index(k) * len(mine) // len(peers):(peers.index(k) + 1) * len(mine) // len(peers)]
        env = {**slot.env, SPARE_CPUS_VAR: ",".join(map(str, allowed))}
        if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
            env["TORCHINDUCTOR_COMPILE_THREADS"] = str(len(allowed))
        pinned.append(Slot(slot.name, slot.device, env, frozenset(share)))
    return pinned


_WARM_UP = 0  # the ticket of warm-up tasks (real tickets start at 1)
_WARM_UP_TIMEOUT_S = 600.0


class _SlotRunner:
    """A slot's worker and the thread that feeds it."""

    def __init__(self, slot: Slot, results: queue.Queue[tuple[int, str, TaskResult]]) -> None:
        self.slot = slot
        self.executor = LocalExecutor(slot.env, slot.cpus)
        self.inbox: queue.Queue[tuple[int, Any, float] | None] = queue.Queue()
        self.busy = False
        self._results = results
        self.thread = threading.Thread(target=self._loop, name=f"trt-routes-{slot.name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            item = self.inbox.get()
            if item is None:
                self.executor.close()
                return
            ticket, task, timeout = item
            if ticket == _WARM_UP:  # nobody waits for it: a failure just means a fresh worker next time
                with contextlib.suppress(Exception):
                    self.executor.run(task, timeout)
                continue
            try:
                result = self.executor.run(task, timeout)
            except BaseException as exc:  # never lose a ticket: the coordinator waits for it
                result = TaskResult(status=TrialStatus.CRASHED, error=f"executor error: {exc}",
                                    log=traceback.format_exc())
            result.meta = {**result.meta, "worker": self.slot.name}
            self._results.put((ticket, self.slot.name, result))


class PoolExecutor(InFlightRun):
    """Keeps every slot busy; ``free_slots``/``submit``/``wait`` for apply's dispatch loop."""

    def __init__(self, slots: list[Slot]) -> None:
        if not slots:
            raise UsageError("no worker slots to run trials on")
        self.slots = slots
        self._results: queue.Queue[tuple[int, str, TaskResult]] = queue.Queue()
        self._runners: dict[str, _SlotRunner] = {}
        self._done: dict[int, TaskResult] = {}
        self._tickets = 0

    @property
    def workers_started(self) -> int:
        return sum(r.executor.workers_started for r in self._runners.values())

    def _runner(self, slot: Slot) -> _SlotRunner:
        if slot.name not in self._runners:
            self._runners[slot.name] = _SlotRunner(slot, self._results)
        return self._runners[slot.name]

    def _idle(self, device: Mapping[str, str] | None) -> list[Slot]:
        return [s for s in self.slots if s.serves(device)
                and not (s.name in self._runners and self._runners[s.name].busy)]

    def free_slots(self, target: Target | None) -> int:
        return len(self._idle(target_device(target)))

    def submit(self, task: Any, timeout: float) -> int:
        device = target_device(task_target(task))
        idle = self._idle(device)
        if not idle:
            if not any(s.serves(device) for s in self.slots):
                have = ", ".join(f"{s.name} ({s.device.get('gpu_name') or s.device.get('cpu_model', '?')})"
                                 for s in self.slots)
                raise UsageError(f"no local worker runs on the device this job needs ({_describe(device)})",
                                 f"workers here: {have}")
            raise RuntimeError("submit() with every matching slot busy; check free_slots() first")
        runner = self._runner(idle[0])
        runner.busy = True
        self._tickets += 1
        runner.inbox.put((self._tickets, task, timeout))
        return self._tickets

    def warm(self, tasks: list[Any]) -> None:
        """Start the worker of every slot that serves one of ``tasks``' devices and run the task there
        first: the workers' start-up (the backend's imports, a CUDA context) overlaps the reference run
        and each other, instead of each GPU paying it on its first trial."""
        for task in tasks:
            for slot in self.slots:
                if slot.serves(target_device(task_target(task))) and slot.name not in self._runners:
                    self._runner(slot).inbox.put((_WARM_UP, task, _WARM_UP_TIMEOUT_S))

    def _take(self) -> tuple[int, TaskResult]:
        if not any(r.busy for r in self._runners.values()):
            raise RuntimeError("wait() with nothing submitted")
        ticket, slot_name, result = self._results.get()
        self._runners[slot_name].busy = False
        return ticket, result

    def _has_room(self, task: Any) -> bool:
        """A matching slot is idle, or none serves the task (then ``submit`` says so)."""
        device = target_device(task_target(task))
        return bool(self._idle(device)) or not any(s.serves(device) for s in self.slots)

    def close(self) -> None:
        for runner in self._runners.values():
            if runner.busy and runner.executor._worker is not None:
                runner.executor._worker.kill()  # interrupted mid-task: do not wait for it
            runner.inbox.put(None)
        for runner in self._runners.values():
            runner.thread.join(10)
        self._runners.clear()

    def __enter__(self) -> PoolExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(device: Mapping[str, str] | None) -> str:
    if not device:
        return "any"
    if device.get("device") == "gpu":
        return f"GPU {device.get('gpu_name', '?')} (compute capability {device.get('compute_capability', '?')})"
    return f"CPU {device.get('cpu_model', '?')} with {device.get('cpu_count', '?')} core(s)"
