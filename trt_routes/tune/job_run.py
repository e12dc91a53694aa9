"""One job while ``tune.apply.Applier`` runs it: its phase, why it stopped proposing, what it has in flight,
its trials and its confirmation rounds (``JobRun``). Several may run at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from trt_routes.cache.store import TrialRecord
from trt_routes.jobs import Job
from trt_routes.plan.diff import JobPlan
from trt_routes.search import Search
from trt_routes.selection.confirm import Request
from trt_routes.selection.rank import Selection


class Phase(Enum):
    """Where a job is in ``Applier.tune_jobs``; it only moves down this list, then the job is finished."""

    REFERENCE = "reference"  # a tune job waits for its reference data (its own run or another job's)
    SEARCH = "search"  # its search proposes routes and its trials run (a reselection has none)
    CONFIRM = "confirm"  # the raw selection is made; side-by-side re-measurements run, round by round


class Halt(Enum):
    """Why a job proposes nothing more before its search ends; a stronger reason replaces a weaker one
    (FAILED over CUT over BUDGET). What it has in flight is still recorded."""

    BUDGET = 1  # its max_builds is reached: selected and locked as usual once what runs is back
    CUT = 2  # another job failed (no --keep-going) before this one had everything: it is not locked
    FAILED = 3  # its reference run failed (``error`` says how): reported as failed


@dataclass(eq=False)
class JobRun:
    """One job while it runs (``Applier.tune_jobs`` may run several at once)."""

    jp: JobPlan
    started: float
    trials: dict[str, TrialRecord]
    search: Search | None = None  # None: not a tune job (a reselection)
    phase: Phase = Phase.SEARCH
    halt: Halt | None = None
    ref: tuple[str, str] | None = None  # (inputs sha, outputs sha) once known
    ref_ticket: int | None = None  # its reference run, while in flight
    ref_submitted: float = 0.0  # when it was submitted (perf_counter), for the timing log
    error: str | None = None  # why it cannot go on (its reference run failed)
    in_flight: dict[int, str] = field(default_factory=dict)  # ticket -> route
    built: int = 0
    fresh: bool = True  # a result came in since the search was last asked
    batch: list[str] = field(default_factory=list)  # what the search last proposed that is not running yet
    # once the search is over (Phase.CONFIRM):
    cands: list[str] = field(default_factory=list)  # the candidates it decides among
    raw: Selection | None = None  # the selection before side-by-side confirmation
    requests: list[Request] = field(default_factory=list)  # re-measurements of this round not started yet
    confirm_rounds: int = 0
    remeasuring: tuple[int, Request] | None = None  # the re-measurement in flight: (ticket, request)
    confirm_failed: bool = False  # a re-measurement failed: the raw selection stands
    busy_retakes: int = 0  # re-measurements discarded because the host was busy (``measurement.busy``)

    @property
    def job(self) -> Job:
        return self.jp.job

    def reference_known(self, ref: tuple[str, str] | None, error: str | None) -> None:
        """Its reference came back (``error``: the run failed, and so does the job)."""
        self.ref, self.error, self.phase = ref, error, Phase.SEARCH
        if error is not None:
            self.halt = Halt.FAILED

    def cut(self) -> None:
        """Another job failed (no --keep-going): nothing more starts for this one. It is cut short
        (unlocked) unless it already has everything it needs (its confirmation complete)."""
        if self.halt is Halt.FAILED or (self.phase is Phase.CONFIRM and not self.requests
                                        and self.remeasuring is None):
            return
        self.halt, self.requests = Halt.CUT, []

    @property
    def running(self) -> bool:
        """Something of this job is in a worker."""
        return bool(self.in_flight) or self.ref_ticket is not None or self.remeasuring is not None

    def holds(self, ticket: int) -> bool:
        """``ticket`` is this job's: a trial, its reference run or its re-measurement."""
        return ticket in self.in_flight or ticket == self.ref_ticket or \
            (self.remeasuring is not None and ticket == self.remeasuring[0])

    @property
    def cold(self) -> bool:
        """No trial of its group has finished yet (its first build has the compile caches to fill)."""
        return not self.trials

    @property
    def busy(self) -> bool:
        """Something runs, its reference is awaited, its search wants more than there was room for, or its
        confirmation has re-measurements to run."""
        return self.running or self.phase is Phase.REFERENCE or bool(self.batch) or bool(self.requests)
