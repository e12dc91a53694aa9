"""The side-by-side confirmation rounds of one apply: which re-measurements a job's selection still lacks, each
sent to a free worker, what comes back judged (a busy host's turns taken again, ``measurement.busy``) and stored
(``trt_routes.selection.confirm``), and the engines they need fetched or rebuilt first. ``tune.apply.Applier``
holds one; it runs the trials (``TrialRunner``) these rounds lean on."""

from __future__ import annotations

__all__ = ["BUSY_RETAKES", "ConfirmationRounds"]

from trt_routes.cache import side_tables
from trt_routes.cache.store import TrialRecord
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.meta import TrialMeta
from trt_routes.evidence.noise import busy_reason
from trt_routes.execute.protocol import settle_spec
from trt_routes.execute.tasks import RemeasureTask, TaskResult
from trt_routes.jobs import Job
from trt_routes.lockfile import Lockfile
from trt_routes.routes import describe, route_dict
from trt_routes.selection.confirm import Remeasurement, Request, remeasure_key
from trt_routes.selection.final import confirm_statistic, confirm_turns, final_selection
from trt_routes.selection.sequential import Stopping, schedule, spread_of, turn_target
from trt_routes.tune.job_run import Halt, JobRun
from trt_routes.tune.trials import JobFailed, TrialRunner

#: Side-by-side re-measurements timed on a busy host taken again before ``measurement.busy`` decides.
BUSY_RETAKES = 2


class ConfirmationRounds:
    """The confirmation rounds of the jobs one apply runs, over its trial runner and lockfile."""

    def __init__(self, runner: TrialRunner, lock: Lockfile) -> None:
        self.runner = runner
        self.lock = lock

    def next_confirmation_round(self, tuning: JobRun) -> None:
        """The re-measurements the selection still lacks: against the default, then possibly against the
        locked winner (at most three rounds); stored as they come, so a later apply or plan re-decides
        without measuring (``trt_routes.selection.final``)."""
        assert tuning.raw is not None
        if tuning.confirm_rounds >= 3:
            return
        tuning.confirm_rounds += 1
        _, tuning.requests = final_selection(tuning.job, tuning.trials, [], self.runner.cache,
                                             self.lock.jobs.get(tuning.job.name), raw=tuning.raw)

    def confirm(self, tuning: JobRun, force: bool) -> None:
        """Start the job's next side-by-side re-measurement where a worker is free (``force``: nothing runs
        anywhere)."""
        if not tuning.requests or tuning.remeasuring is not None:
            return
        if self.runner.executor.free_slots(tuning.job.target_data) < 1 and not force:
            return
        request = tuning.requests[0]
        try:
            task = self.remeasure_task(tuning.job, tuning.trials, request)
        except JobFailed as exc:  # its reference run (a reselection computes it here) failed
            task = str(exc)
        if isinstance(task, str):
            self.confirmation_failed(tuning, task)
            return
        tuning.requests.pop(0)
        engines = 1 + len(request.challengers)  # the baseline and its challengers
        challengers = ", ".join(map(describe, request.challengers))
        self.runner.reporter.phase(tuning.job, f"re-measuring side by side: {challengers} against "
                                   f"{describe(request.baseline)} (up to {len(task.order)} interleaved turns)")
        limit = tuning.job.measurement.timeout_s * (1 + engines)
        tuning.remeasuring = (self.runner.executor.submit(task, limit), request)

    def take_remeasurement(self, tuning: JobRun, result: TaskResult) -> None:
        """Store a side-by-side re-measurement that came back; the next round when this one is done (not
        when the job was cut short meanwhile: what was in flight is stored, nothing more starts)."""
        assert tuning.remeasuring is not None
        request = tuning.remeasuring[1]
        tuning.remeasuring = None
        job, settings = tuning.job, tuning.job.strategy.confirm
        assert settings is not None
        if result.status != TrialStatus.OK:
            self.confirmation_failed(tuning, f"{result.status}: {result.error}")
            return
        busy = busy_reason(TrialMeta.from_json(result.meta), job.measurement.busy)
        if busy is not None:  # the turns were timed under load: take them again, then refuse or warn
            if tuning.busy_retakes < BUSY_RETAKES:
                tuning.busy_retakes += 1
                tuning.requests.insert(0, request)
                self.runner.reporter.message(f"{job.name}: side-by-side re-measurement discarded, {busy}; taking it "
                                             f"again ({tuning.busy_retakes} of {BUSY_RETAKES})")
                return
            if job.measurement.busy.action == "refuse":
                tuning.error = (f"the side-by-side re-measurement was not kept: {busy} in {BUSY_RETAKES + 1} tries "
                                "(measurement.busy: refuse; run apply again on a quieter host)")
                tuning.requests, tuning.halt = [], Halt.FAILED
                return
            self.runner.reporter.message(f"{job.name}: decided side by side while {busy} (measurement.busy: warn; "
                                  "`trt-routes apply --remeasure` takes it again on a quiet host)")
        meta = {k: v for k, v in result.meta.items() if k != "slots"}
        m = Remeasurement(request.baseline, request.challengers,
                          tuple((r, float(t)) for r, t in result.meta["slots"]), meta)
        statistic, turns = confirm_statistic(job), confirm_turns(job)
        key = remeasure_key(job.group_key, request.baseline, request.challengers, settings, statistic=statistic,
                            turns=turns)
        if side_tables.remeasurement(self.runner.cache, key, job.group_key) is not None:  # another rule, undecided
            key = remeasure_key(job.group_key, request.baseline, request.challengers, settings, rule=True,
                                statistic=statistic, turns=turns)
        side_tables.add_remeasurement(self.runner.cache, key, job.group_key, job.name, m.to_json())
        if not tuning.requests and tuning.halt is not Halt.CUT:
            self.next_confirmation_round(tuning)

    def confirmation_failed(self, tuning: JobRun, why: str) -> None:
        self.runner.reporter.message(f"{tuning.job.name}: side-by-side re-measurement failed ({why}); "
                              "the raw selection stands for this run")
        tuning.requests, tuning.confirm_failed = [], True

    def remeasure_task(self, job: Job, trials: dict[str, TrialRecord], request: Request) -> RemeasureTask | str:
        """The task that re-measures ``request`` side by side in one worker (engines the store lacks are
        fetched or rebuilt first); or why it cannot run."""
        settings = job.strategy.confirm
        assert settings is not None
        routes = [request.baseline, *request.challengers]
        ref = self.runner.reference(job)
        for route in routes:
            sha = trials[route].engine_sha256
            if not self.have_engine(sha):
                self.runner.reporter.rebuild(job, route)
                trials[route] = self.runner.run_trial(job, route, ref)
                if trials[route].status != TrialStatus.OK:
                    return f"rebuilding {describe(route)} failed: {trials[route].error}"
        engines = tuple((r, job.build_spec(route_dict(r)), trials[r].engine_sha256) for r in routes)
        return RemeasureTask(
            backend=job.backend, spec=engines[0][1], store_root=str(self.runner.store.root), inputs_sha=ref[0],
            engines=engines, order=tuple(schedule(request.baseline, request.challengers, settings.rounds)),
            iterations=settings.iterations, warmup=job.measurement.warmup,
            settle=settle_spec(job.measurement.settle), slot_ms=settings.slot_ms,
            turn_target=turn_target(settings), max_slot_ms=settings.max_slot_ms,
            turn_spread=spread_of(trials[request.baseline].samples, job.measurement.iterations),
            stopping=Stopping.of(settings, len(request.challengers)), statistic=confirm_statistic(job))

    def have_engine(self, sha: str) -> bool:
        """Whether the store holds engine ``sha``, fetched from a cache remote if it lacks it."""
        if self.runner.store.has(sha):
            return True
        from trt_routes.share.remote import fetch_blob  # only when an engine is missing (~5 ms of imports)

        return fetch_blob(self.runner.cache, self.runner.store, sha, self.runner.reporter.message)
