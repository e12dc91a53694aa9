"""What apply is asked (ApplyOptions), what it reports as it goes (Reporter) and what it returns
(JobOutcome per job, ApplyResult with the exit code)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from trt_routes.cache.store import TrialRecord
from trt_routes.errors import Exit, UsageError
from trt_routes.jobs import Job, PlanAction
from trt_routes.lockfile import LockEntry
from trt_routes.plan.diff import Plan
from trt_routes.selection.rank import Selection

# the exit-code table is trt_routes.errors.Exit; these aliases keep existing references working
EXIT_OK = Exit.OK
EXIT_WORK = Exit.WORK
EXIT_USAGE = Exit.USAGE
EXIT_UNAVAILABLE = Exit.UNAVAILABLE
EXIT_FAILED = Exit.FAILED


class Reporter(Protocol):
    """Receives apply's progress; the CLI renders it (rich on a terminal, plain lines otherwise)."""

    def plan(self, plan: Plan) -> None: ...
    def job_start(self, job: Job, builds: int) -> None: ...
    def trial_done(self, job: Job, trial: TrialRecord) -> None: ...
    def job_done(self, outcome: JobOutcome) -> None: ...
    def message(self, text: str) -> None: ...
    def phase(self, job: Job, text: str) -> None: ...  # a step that takes time and builds nothing
    # a build the plan did not count: an engine gone from the blob store, built again (its trial follows)
    def rebuild(self, job: Job, route: str) -> None: ...


class SilentReporter:
    def rebuild(self, job: Job, route: str) -> None: ...
    def plan(self, plan: Plan) -> None: ...
    def job_start(self, job: Job, builds: int) -> None: ...
    def trial_done(self, job: Job, trial: TrialRecord) -> None: ...
    def job_done(self, outcome: JobOutcome) -> None: ...
    def message(self, text: str) -> None: ...
    def phase(self, job: Job, text: str) -> None: ...


@dataclass
class ApplyOptions:
    only: list[str] = field(default_factory=list)
    keep_going: bool = False
    dry_run: bool = False
    workers: int | None = None  # None: the manifest's execution.workers (default: every matching GPU, 1 CPU)
    executor: str | None = None  # local | ray (None: the manifest's)
    address: str | None = None  # ray cluster address
    retry_failed: bool = False  # forget the selected jobs' cached crashed/timeout trials first: they run again
    remeasure: bool = False  # decide the selected jobs again, side by side afresh (``tune.retry.forget_decisions``)
    profile: bool = True  # profile each locked job's default and winner (``tune.profiles``; --no-profile)

    # -- which flags of `trt-routes apply` combine: the rule lives here, the CLI only parses --
    @classmethod
    def from_flags(cls, *, only: list[str] | None = None, keep_going: bool = False, dry_run: bool = False,
                   workers: int | None = None, executor: str | None = None, address: str | None = None,
                   frozen: bool = False, plan: bool = False, retry_failed: bool = False,
                   remeasure: bool = False, profile: bool = True) -> ApplyOptions:
        """The options of one apply call; UsageError for flags that exclude each other. ``frozen``
        (--frozen: rebuild the locked routes, ``trt_routes.gitops.frozen``) and ``plan`` (--plan FILE given:
        execute a saved plan, ``trt_routes.plan.saved``) are checked here and acted on by those modules."""
        if frozen and (workers is not None or executor not in (None, "local") or address is not None):
            raise UsageError("--frozen rebuilds one locked route per job, one job at a time, in one local "
                             "worker: --workers, --executor and --address do not apply to it",
                             "drop them, or tune with a plain `trt-routes apply`")
        if frozen and plan:
            raise UsageError("--frozen and --plan exclude each other",
                             "--frozen rebuilds what tuning.lock records; --plan executes a saved plan")
        if plan and only:
            raise UsageError("--only cannot be combined with --plan",
                             "the saved plan keeps the --only it was made with")
        if retry_failed and (frozen or plan):
            raise UsageError(f"--retry-failed cannot be combined with {'--frozen' if frozen else '--plan'}",
                             "run `trt-routes apply --retry-failed [--only JOB]` on its own")
        if remeasure and (frozen or plan):
            raise UsageError("--remeasure decides jobs again: it does not combine with --frozen or --plan",
                             "run `trt-routes apply --remeasure [--only JOB]` on its own")
        return cls(only=list(only or []), keep_going=keep_going, dry_run=dry_run, workers=workers,
                   executor=executor, address=address, retry_failed=retry_failed, remeasure=remeasure,
                   profile=profile)


@dataclass
class JobOutcome:
    job: Job
    action: PlanAction | Literal["frozen"]  # "frozen": apply --frozen rebuilt the locked route
    built: int = 0
    reused: int = 0
    failed: int = 0
    selection: Selection | None = None
    lock_entry: LockEntry | None = None  # the job's entry in tuning.lock (written or kept)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def entry(self) -> dict[str, Any] | None:
        """The lock entry as plain data, as written to tuning.lock (for ``apply --json``)."""
        return self.lock_entry.to_data() if self.lock_entry is not None else None


@dataclass
class ApplyResult:
    plan: Plan
    outcomes: list[JobOutcome] = field(default_factory=list)
    lock_written: bool = False
    stopped_early: bool = False

    @property
    def exit_code(self) -> int:
        if any(o.error for o in self.outcomes):
            return EXIT_FAILED
        if self.plan.blocked:
            return self.plan.blocked_exit or EXIT_USAGE
        return EXIT_OK

    @property
    def built(self) -> int:
        return sum(o.built for o in self.outcomes)
