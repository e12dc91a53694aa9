"""The coordinator's per-job state (trt_routes.tune.apply: Phase and Halt): a job cut short by another
job's failure while it confirms stores the re-measurement it had in flight and starts nothing more (it
used to pop an emptied list: IndexError), and a job whose confirmation is complete is not cut."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from trt_routes.cache import side_tables
from trt_routes.execute.tasks import TaskResult
from trt_routes.plan.diff import JobPlan
from trt_routes.project import open_project
from trt_routes.selection.confirm import Request
from trt_routes.tune.apply import Applier
from trt_routes.tune.job_run import Halt, JobRun, Phase
from trt_routes.tune.outcome import ApplyOptions, SilentReporter

OTHER = "-intra_op_num_threads=2"


def confirming(job: Any) -> JobRun:
    tuning = JobRun(JobPlan(job, "tune", ()), 0.0, {})
    tuning.phase = Phase.CONFIRM
    return tuning


def test_a_job_cut_while_confirming_stores_what_was_in_flight_and_starts_nothing(tuned: Path,
                                                                                tmp_path: Path) -> None:
    shutil.copytree(tuned.parent, tmp_path / "p")
    project = open_project(tmp_path / "p" / "tuning.yaml")
    job = project.jobs[0]
    assert job.strategy.confirm is not None
    with project.open_cache() as cache:
        before = len(side_tables.remeasurements_for(cache, job.group_key))
        applier = Applier(project, cache, project.read_lock(), SilentReporter(), ApplyOptions(),
                          executor=None)  # type: ignore[arg-type]  # nothing is submitted here
        tuning = confirming(job)
        tuning.remeasuring = (7, Request("", (OTHER,)))
        tuning.requests = [Request(OTHER, ("-x=1",))]
        assert tuning.busy and tuning.holds(7)
        tuning.cut()  # another job failed without --keep-going
        assert tuning.halt is Halt.CUT and tuning.requests == [] and tuning.busy  # its re-measurement runs
        applier.rounds.take_remeasurement(tuning, TaskResult("ok", meta={"slots": [["", 1.0], [OTHER, 0.5]] * 3}))
        assert tuning.remeasuring is None and tuning.requests == [] and not tuning.busy
        assert tuning.confirm_rounds == 0  # no next round started
        assert len(side_tables.remeasurements_for(cache, job.group_key)) == before + 1  # what came back is stored


def test_a_job_whose_confirmation_is_complete_is_not_cut(tuned: Path) -> None:
    job = open_project(tuned).jobs[0]
    done = confirming(job)
    done.cut()
    assert done.halt is None and not done.busy  # it had everything it needed: it is locked
    budget = confirming(job)
    budget.halt = Halt.BUDGET
    budget.requests = [Request("", (OTHER,))]
    budget.cut()
    assert budget.halt is Halt.CUT  # cut beats the budget
    failed = JobRun(JobPlan(job, "tune", ()), 0.0, {})
    failed.phase = Phase.REFERENCE
    failed.reference_known(None, "reference run failed (crashed): boom")
    failed.cut()
    assert failed.phase is Phase.SEARCH and failed.halt is Halt.FAILED  # a failure is reported as one
