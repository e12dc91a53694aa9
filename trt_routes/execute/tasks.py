"""What crosses the process boundary: picklable task and result records."""

from __future__ import annotations

__all__ = ["ProfileTask", "ReferenceTask", "RemeasureTask", "TaskResult", "TrialTask", "WarmupTask", "healthy",
           "reference_task", "warmups"]

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes import canonical
from trt_routes.backends.base import BuildSpec
from trt_routes.evidence import TrialStatus
from trt_routes.execute.protocol import SettleSpec
from trt_routes.selection.sequential import Stopping

if TYPE_CHECKING:
    from trt_routes.jobs import Job


@dataclass(frozen=True)
class TrialTask:
    """Build ``spec.route``, check accuracy against the reference, then time it."""

    backend: str
    spec: BuildSpec
    store_root: str  # the content-addressed blob store (engines, arrays)
    inputs_sha: str
    reference_sha: str
    l0_params: tuple[tuple[float, float], ...]
    warmup: int
    iterations: int
    repeats: int
    seed: int = 0
    settle: SettleSpec = field(default_factory=SettleSpec)  # warm-up until settled (window 0: fixed only)
    judge_busy: bool = False  # measurement.busy: refuse: the noise context must read enough ticks to judge


@dataclass(frozen=True)
class ReferenceTask:
    """Generate inputs (or take given ones) and compute reference outputs."""

    backend: str
    spec: BuildSpec
    store_root: str
    inputs: dict[str, dict[str, Any]]  # name -> {"dtype", "low", "high", "shape"}
    seed: int
    given_inputs_sha: str = ""  # user-provided inputs already in the store


@dataclass(frozen=True)
class WarmupTask:
    """Start a worker for ``spec.target`` and warm ``backend`` up in it (``Backend.warm_up``) before
    any trial needs it."""

    backend: str
    spec: BuildSpec


def warmups(jobs: Iterable[Job]) -> list[WarmupTask]:
    """One warm-up per backend and target device among ``jobs``."""
    tasks: dict[tuple[str, str], WarmupTask] = {}
    for job in jobs:
        key = (job.backend, canonical.dumps(job.target_data.get("device")))
        tasks.setdefault(key, WarmupTask(backend=job.backend, spec=job.build_spec({})))
    return list(tasks.values())


def reference_task(job: Job, store_root: str) -> ReferenceTask:
    """The reference run of ``job`` (its inputs generated from its seed, or given) into the blob store at
    ``store_root``."""
    return ReferenceTask(backend=job.backend, spec=job.build_spec({}), store_root=store_root, inputs=job.inputs,
                         seed=job.measurement.seed)


@dataclass
class TaskResult:
    """What a worker returns. ``status`` follows the trial statuses of the cache."""

    status: TrialStatus
    error: str = ""
    log: str = ""
    samples: list[float] = field(default_factory=list)
    losses: dict[str, dict[str, float]] = field(default_factory=dict)
    build_s: float | None = None
    measure_s: float | None = None
    engine_sha256: str = ""
    outputs_sha256: str = ""
    inputs_sha256: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    #: the failure is the machine's, not the route's (a full disk, a file it cannot write, a worker that would
    #: not start): the coordinator does not cache it as the route's trial, so the next apply runs it again
    infrastructure: bool = False


def healthy(result: TaskResult) -> bool:
    """Whether the worker that produced ``result`` may serve another task (after any failure it is
    replaced: a backend that raised may have left its library in a bad state)."""
    return result.status == TrialStatus.OK


@dataclass(frozen=True)
class RemeasureTask:
    """Load already-built engines (once, or for each turn: ``Backend.reload_each_turn``) and time them
    interleaved in ``order`` (route names, repeating),
    ``iterations`` timed runs per slot, each engine warmed up (fixed, then until settled) first.

    ``spec`` is the first route's BuildSpec (executors read the target device from it)."""

    backend: str
    spec: BuildSpec
    store_root: str
    inputs_sha: str
    engines: tuple[tuple[str, BuildSpec, str], ...]  # (route, spec, engine sha256)
    order: tuple[str, ...]
    iterations: int
    warmup: int = 0
    settle: SettleSpec = field(default_factory=SettleSpec)
    keep_samples: bool = False  # also return every slot's samples (the landscape recorder wants them)
    slot_ms: float = 0.0  # a slot lasts at least this long: iterations raised from the first engine's timing
    # turns sized to the first engine's noise (``confirm.turn_size``): the relative error aimed at, and the cap
    turn_target: float = 0.0
    max_slot_ms: float = 0.0
    turn_spread: float | None = None  # the baseline's run-to-run spread, from its trial (None: a pilot reads it)
    # sequential stopping (``trt_routes.selection.confirm.Stopping``): the first engine is the baseline, the
    # others its challengers; ``order`` is then ignored and each challenger stops once it is decided
    stopping: Stopping | None = None
    statistic: str = "p50"  # what a slot reports: the median of its runs, or a tail quantile (p90, p99)


@dataclass(frozen=True)
class ProfileTask:
    """One profiled run of an engine already built (``Backend.profile``), on the job's own inputs; never a timed
    run. The result's ``meta["profile"]`` is the layer profile (``trt_routes.evidence.layers``)."""

    backend: str
    spec: BuildSpec
    store_root: str
    inputs_sha: str
    engine_sha: str

    def execute(self) -> TaskResult:
        from trt_routes.backends import registry
        from trt_routes.files.artifacts import BlobStore

        store = BlobStore(Path(self.store_root))
        profile = registry.get(self.backend).profile(store.path(self.engine_sha), self.spec,
                                                     store.get_arrays(self.inputs_sha))
        return TaskResult(status=TrialStatus.OK, meta={"profile": profile.to_json()})
