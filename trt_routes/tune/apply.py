"""apply(): execute a plan. Runs missing trials in isolated workers, writes each trial to the
cache as it finishes, selects, materializes engines and rewrites the lockfile atomically.

The coordinator (``Applier``) schedules jobs; one job's reference and trials are ``trt_routes.tune.trials``,
its lock entry ``trt_routes.tune.locking``, what apply is asked and returns ``trt_routes.tune.outcome``."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator

from trt_routes.cache.store import CacheStore, TrialRecord, database_error
from trt_routes.errors import CacheError
from trt_routes.evidence import TrialStatus
from trt_routes.execute.base import Executor
from trt_routes.execute.tasks import TaskResult, WarmupTask, warmups
from trt_routes.files import memo
from trt_routes.jobs import Job, PlanAction
from trt_routes.lockfile import LockEntry, Lockfile
from trt_routes.plan import decision as decisions
from trt_routes.plan.diff import JobPlan, Plan, compute_plan, make_plan, outcomes, settle
from trt_routes.plan.settled import Settled
from trt_routes.project import LossLookupFromBlobs, Project, exclusive
from trt_routes.search import Search
from trt_routes.search.job import JobSearch, finish_search, job_search, save_progress, takes_priors
from trt_routes.search.priors import related_names
from trt_routes.selection.confirm import Request
from trt_routes.selection.final import final_selection, select_for_job
from trt_routes.selection.rank import DEFAULT_ROUTE, Selection
from trt_routes.tune.confirming import ConfirmationRounds
from trt_routes.tune.job_run import Halt, JobRun, Phase
from trt_routes.tune.locking import LockWriter
from trt_routes.tune.outcome import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    EXIT_WORK,
    ApplyOptions,
    ApplyResult,
    JobOutcome,
    Reporter,
    SilentReporter,
)
from trt_routes.tune.profiles import finalists, profile_finalists
from trt_routes.tune.trials import HostBusy, JobFailed, NotKept, TrialRunner, statistics_ready, to_record

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_UNAVAILABLE", "EXIT_USAGE", "EXIT_WORK", "Applier", "ApplyOptions",
           "ApplyResult", "Halt", "JobOutcome", "Phase", "Reporter", "SilentReporter", "apply", "compute_plan",
           "to_record", "warmup_tasks"]


#: Set to a file path: apply appends one JSON line per event there (``Timings``), for bench/tool_time.py.
TIMINGS_VAR = "TRT_ROUTES_TIMINGS"


class Timings:
    """Apply's own timing events as JSON lines (``$TRT_ROUTES_TIMINGS``; off when unset): each has ``event``,
    ``t`` (``time.time()``, comparable across processes) and what it measured (``build_s``, ``measure_s``
    of a trial, a reference run or a re-measurement, as the worker reports them; ``s`` of a coordinator step)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path if path is not None else os.environ.get(TIMINGS_VAR) or None
        self.lines: list[str] = []

    def __call__(self, event: str, **fields: object) -> None:
        if self.path is not None:
            self.lines.append(json.dumps({"event": event, "t": time.time(), **fields}, default=str))

    def flush(self) -> None:
        if self.path is not None and self.lines:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write("\n".join(self.lines) + "\n")
            self.lines = []


def _settle(project: Project, cache: CacheStore, plan: Plan, ran: list[JobPlan]) -> None:
    """Remember which jobs are up to date now (``plan.settled``): those the plan found so, and those this
    apply worked on, planned again now that their trials and lock entries are written. Only a shortcut for
    later plans: a disk that refuses it loses nothing, and the next plan derives everything."""
    if not Settled.enabled():
        return
    with contextlib.suppress(CacheError):  # StorageError too
        # the entries as tuning.lock now holds them (it rounds what it writes), which later plans read
        done = make_plan([jp.job for jp in ran], cache, project.read_lock(), project.root,
                         LossLookupFromBlobs(cache, project.store)).jobs if ran else []
        settle(cache, [*plan.jobs, *done])


class Applier:
    """Runs one apply over a project with one executor and one open cache: schedules its jobs'
    trials, reference runs and side-by-side re-measurements (``tune_jobs``), then locks each job.

    It holds its collaborators: the trial runner (references, trials, the one place a result becomes a cache
    row), the confirmation rounds and the lock writer; per-job state is each job's ``JobRun``."""

    def __init__(self, project: Project, cache: CacheStore, lock: Lockfile, reporter: Reporter,
                 options: ApplyOptions, executor: Executor) -> None:
        self.runner = TrialRunner(project, cache, reporter, executor)
        self.cache, self.reporter, self.executor = cache, reporter, executor
        self.lock = lock
        self.options = options
        self.locks = LockWriter(project, cache, lock)
        self.timings = Timings()
        self.rounds = ConfirmationRounds(self.runner, lock)

    # -- tuning several jobs at once ----------------------------------------------------------------
    def tune_jobs(self, jps: list[JobPlan], keep_going: bool) -> Iterator[JobOutcome]:
        """Run ``jps`` in plan order and yield each one's outcome as it finishes.

        A job moves through ``Phase.REFERENCE`` (its reference data being computed), ``Phase.SEARCH``
        (trials proposed and run) and ``Phase.CONFIRM`` (the raw selection made, side-by-side
        re-measurements run), then is finished: locked, or reported failed or cut short. A ``Halt``
        says why a job proposes nothing more before its search ends. Several jobs may be active at once:

        1. Jobs start in plan order. The next job starts while others run only when every running job
           has the very same target (a CPU job never shares the host with GPU compilations it did not
           share before) and the executor has a free worker for it; with one worker nothing overlaps. A
           search that takes related jobs' winners as priors waits for the related jobs running (``overlaps``).
        2. Free workers go to running jobs first, in plan order; a job gets the rest only when the
           running ones have what they want in flight (a search's last trials, a step's results it must
           wait for, a reference being computed). A job starting submits its reference run, unless its
           reference is known or another running job computes the same one.
        3. A job with no trial yet runs its first one alone while another job can use the free workers:
           that first build fills the compile caches (Inductor's kernels, a TensorRT timing cache) its
           other routes reuse, where routes built side by side from cold would each compile everything.
           When no job is left to start, that restraint is lifted.
        4. Results are recorded as they arrive, whichever job they belong to. A finished search's
           side-by-side confirmation runs as tasks too (one worker each), so other jobs' trials go on.
        5. A job's budget (``max_builds``) stops only its own proposals (``Halt.BUDGET``): what runs
           finishes, then it is selected and confirmed as usual.
        6. When a job fails and ``keep_going`` is off, nothing new starts; running jobs stop proposing
           (``Halt.CUT``), what they have in flight is recorded, and those cut short are left unlocked
           (their trials are cached for the next apply). A job that already had everything it needed
           (its confirmation complete) is locked.

        Two jobs A then B with the same target on two workers, both references known (cached)::

            worker 1 | A default    | A -x=1 | A -x=2 | A -x=3 | A: -x=2 vs default, side by side |
            worker 2 |   B default     | B -y=1 | B -y=2 | B -y=3 | B -y=4 | B -y=5 | ...
                     ^ t0            ^ t1     ^ t2              ^ t3

        t0: A starts and builds its default alone (3); B starts beside it (1) and builds its own
        default on the free worker, alone too (3). t1, t2: each freed worker goes to a running job
        in plan order (2): A first, B when A has what it wants in flight. t3: A's search is over; its
        re-measurement takes worker 1 as a task while B's trials go on (4). Had A failed at t2
        (without ``keep_going``), B would stop proposing, its trial in flight would be recorded, and B
        would stay unlocked (6).
        """
        pending = deque(jps)
        active: list[JobRun] = []
        stop = False
        while True:
            for tuning in list(active):  # running jobs propose in plan order; finished ones finish
                if stop:
                    tuning.cut()
                force = not any(t.running for t in active)
                if tuning.phase is not Phase.CONFIRM:
                    self.propose(tuning, force)
                    if not tuning.busy and tuning.halt in (None, Halt.BUDGET):
                        self.begin_selection(tuning)
                if tuning.phase is Phase.CONFIRM:
                    self.rounds.confirm(tuning, force)
                if tuning.busy:
                    continue
                active.remove(tuning)
                if tuning.halt is Halt.CUT:
                    self.reporter.message(f"{tuning.job.name}: stopped after another job failed; its "
                                          f"{tuning.built} new trial(s) are cached for the next apply")
                    continue
                outcome = self.finish(tuning)
                stop |= bool(outcome.error) and not keep_going
                yield outcome
            if pending and not stop and (not active or self.overlaps(pending[0].job, active)):
                active.append(self.start(pending.popleft(), active))
                continue
            for tuning in active:  # no job to start here: a job's first trial need not run alone after all
                if tuning.cold and tuning.batch:
                    self.propose(tuning, force=False, first_alone=False)
            if not active:
                return
            ticket, result = self.executor.wait()
            tuning = next(t for t in active if t.holds(ticket))  # what runs belongs to an active job
            if ticket == tuning.ref_ticket:
                self.timings("reference", job=tuning.job.name, s=time.perf_counter() - tuning.ref_submitted,
                             worker_s=result.meta.get("worker_s"))
                self.take_reference(tuning, result, active)
                continue
            if tuning.remeasuring is not None and ticket == tuning.remeasuring[0]:
                self.timings("remeasure", job=tuning.job.name, measure_s=result.measure_s,
                             slots=len(result.meta.get("slots") or []),
                             challengers=len(tuning.remeasuring[1].challengers))
                self.rounds.take_remeasurement(tuning, result)
                continue
            route = tuning.in_flight.pop(ticket)
            self.timings("trial", job=tuning.job.name, route=route, build_s=result.build_s,
                         measure_s=result.measure_s)
            try:
                tuning.trials[route] = self.runner.record(tuning.job, route, result)
            except (HostBusy, NotKept) as exc:  # measurement.busy: refuse; the model changed under apply
                tuning.error, tuning.halt = str(exc), Halt.FAILED
                continue
            tuning.built += 1
            tuning.fresh = True
            if isinstance(tuning.search, JobSearch):
                save_progress(self.cache, tuning.job, tuning.search, tuning.trials)

    def overlaps(self, job: Job, active: list[JobRun]) -> bool:
        """``job`` may start beside the ``active`` ones: the same target, a worker free for it, and none of them
        a related job whose winner its search would take as a prior (it starts once they are decided, so its
        priors do not depend on which finishes first, and are those plan named)."""
        if related_names(job.name, job.model, job.target, [t.job.name for t in active]) and \
                takes_priors(self.cache, job):  # the query only where a related job runs
            return False
        return all(t.job.target_data == job.target_data for t in active) and \
            self.executor.free_slots(job.target_data) > 0

    def start(self, jp: JobPlan, active: list[JobRun]) -> JobRun:
        """A job, started: a tune job's search (its reference known, being computed for another job with
        the same reference, or submitted now); any other job (a reselection) has nothing to run."""
        job = jp.job
        tuning = JobRun(jp, time.perf_counter(), self.cache.group(job.group_key))
        if jp.action != PlanAction.TUNE:
            return tuning
        assert job.expression is not None and job.catalog is not None
        tuning.search = self.job_search(job, tuning.trials)
        self.reporter.job_start(job, len(jp.to_build))
        tuning.ref = self.runner.known_reference(job)
        if tuning.ref is None:
            tuning.phase = Phase.REFERENCE
            if not any(t.job.reference_key == job.reference_key and t.phase is Phase.REFERENCE for t in active):
                tuning.ref_ticket = self.executor.submit(self.runner.reference_task(job), job.measurement.timeout_s)
                tuning.ref_submitted = time.perf_counter()
        statistics_ready()  # while the reference runs (or the worker starts), before any trial is timed
        return tuning

    def take_reference(self, tuning: JobRun, result: TaskResult, active: list[JobRun]) -> None:
        """A reference run came back: it serves every running job with the same reference."""
        tuning.ref_ticket = None
        try:
            ref: tuple[str, str] | None = self.runner.reference_done(tuning.job, result)
            error = None
        except JobFailed as exc:
            ref, error = None, str(exc)
        for other in active:
            if other.phase is Phase.REFERENCE and other.job.reference_key == tuning.job.reference_key:
                other.reference_known(ref, error)

    def propose(self, tuning: JobRun, force: bool, first_alone: bool = True) -> None:
        """Dispatch what the job's search wants measured, as far as free workers allow (one worker: one at
        a time, in the search's order). The search is asked again only after a result of this job came in,
        so an adaptive search sees every finished trial before proposing more. When it keeps what it
        proposes (``Search.keeps_proposals``), its routes may also wait in a busy worker's queue
        (``Executor.queue_room``), so that worker starts the next as soon as it is done. ``force``: nothing
        runs anywhere, so one route is submitted even without a free worker (an executor without a
        matching worker then says so, instead of the search ending silently). ``first_alone``: a job with no
        trial yet dispatches nothing beside its first one (``tune_jobs`` lifts that when no other job can
        use the free workers)."""
        if tuning.halt is not None or tuning.search is None:
            tuning.batch = []
            return
        if tuning.phase is Phase.REFERENCE or tuning.ref is None:
            return  # its reference is being computed
        job, trials, in_flight = tuning.job, tuning.trials, tuning.in_flight
        batch = tuning.batch
        if tuning.fresh:
            batch = tuning.search.next_batch(outcomes(trials, job.tolerance, self.runner.lookup))
            if DEFAULT_ROUTE not in trials and DEFAULT_ROUTE not in batch:
                batch = [DEFAULT_ROUTE, *batch]
            tuning.fresh = False
        running = set(in_flight.values())
        batch = [r for r in batch if r not in running and r not in trials]
        room = max(self.executor.free_slots(job.target_data), 1 if force and not in_flight else 0)
        if first_alone and tuning.cold:
            room = min(room, 0 if in_flight else 1)
        budget = job.strategy.max_builds
        ref = tuning.ref
        fits = self.fits(tuning)
        within = self.dispatch(job, batch[:room], ref, in_flight, budget, tuning.built, fits)
        if within and tuning.search.keeps_proposals:
            ahead = batch[room:room + self.executor.queue_room(job.target_data)]
            within = self.dispatch(job, ahead, ref, in_flight, budget, tuning.built, fits)
        if not within:
            tuning.halt = Halt.BUDGET
        running = set(in_flight.values())
        tuning.batch = [] if not within else [r for r in batch if r not in running]

    def fits(self, tuning: JobRun) -> Callable[[str], bool]:
        """Whether a route's build fits in what the job's ``max_minutes`` leaves now (``JobSearch.fits``:
        its cost times the baseline's build time), checked again as each route is dispatched."""
        search = tuning.search
        if not isinstance(search, JobSearch) or search.max_seconds is None:
            return lambda route: True
        unit_trials = {r: tuning.trials[r] for r in search.unit_routes() if r in tuning.trials}
        unit = search.unit_s(outcomes(unit_trials, tuning.job.tolerance, self.runner.lookup))
        return lambda route: search.fits(route, unit)

    def dispatch(self, job: Job, routes: list[str], ref: tuple[str, str], in_flight: dict[int, str],
                 budget: int | None, built: int, fits: Callable[[str], bool] = lambda route: True) -> bool:
        """Submit ``routes`` in order; False when the budget stopped it (what runs may finish, nothing
        more is proposed). Trials in flight count against ``max_builds``; a route whose estimated build
        does not fit in the time ``max_minutes`` leaves is not started (``fits``); the default route and
        the job's baseline always run."""
        for route in routes:
            always = route == DEFAULT_ROUTE or route in job.baseline_routes
            if not always and ((budget is not None and built + len(in_flight) >= budget) or not fits(route)):
                return False
            ticket = self.executor.submit(self.runner.trial_task(job, route, ref), job.measurement.timeout_s)
            in_flight[ticket] = route
        return True

    def begin_selection(self, tuning: JobRun) -> None:
        """The job's search is over: its candidates, the raw selection, and the side-by-side
        re-measurements that confirmation still lacks (run as tasks like trials, ``confirm``)."""
        jp, trials, search, job = tuning.jp, tuning.trials, tuning.search, tuning.job
        if search is not None:
            self.search_done(job, search, trials)
            cands = search.verdict_routes(outcomes(trials, job.tolerance, self.runner.lookup))
            tuning.cands = [r for r in dict.fromkeys(cands) if r in trials]
        else:
            tuning.cands = list(jp.candidates)
        tuning.raw = select_for_job(job, trials, tuning.cands, self.runner.lookup)
        tuning.phase = Phase.CONFIRM
        self.rounds.next_confirmation_round(tuning)

    def finish(self, tuning: JobRun) -> JobOutcome:
        """Decide (after confirmation), materialize the winner's engine and lock it."""
        jp, trials, job, cands = tuning.jp, tuning.trials, tuning.job, tuning.cands
        outcome = JobOutcome(job=job, action=jp.action)
        outcome.built = tuning.built  # what was built and kept counts, whether or not the job then failed
        try:
            if tuning.error is not None:
                raise JobFailed(tuning.error)
            assert tuning.raw is not None
            outcome.reused = sum(1 for r in cands if r in trials) - tuning.built
            outcome.failed = sum(1 for r in cands if r in trials and trials[r].status != TrialStatus.OK)
            sel, pending = (tuning.raw, []) if tuning.confirm_failed else final_selection(
                job, trials, [], self.cache, self.lock.jobs.get(job.name), raw=tuning.raw)
            outcome.selection = sel
            if sel.winner is None:
                raise JobFailed(sel.summary)
            winner = trials[sel.winner]
            if not self.rounds.have_engine(winner.engine_sha256):
                self.reporter.rebuild(job, sel.winner)
                winner = self.runner.run_trial(job, sel.winner, self.runner.reference(job))
                trials[sel.winner] = winner
                outcome.built += 1
                if winner.status != TrialStatus.OK:
                    raise JobFailed(f"rebuilding the winner failed: {winner.error}")
            outcome.lock_entry = self.locks.entry(job, sel, winner, cands, outcome)
            t0 = time.perf_counter()
            self.locks.commit(job, outcome.lock_entry, durable=outcome.built > 0)
            self.timings("lock_write", job=job.name, s=time.perf_counter() - t0)
            self.store_decision(tuning, sel, pending)
            if self.options.profile:  # where the winner's gain comes from, for explain --layers and the report
                profile_finalists(self.runner, job, trials, finalists(job, sel), self.runner.reference(job)[0])
        except JobFailed as exc:
            outcome.error = str(exc)
        outcome.seconds = time.perf_counter() - tuning.started
        return outcome

    def store_decision(self, tuning: JobRun, sel: Selection, pending: list[Request]) -> None:
        """Keep the decision as a value (``trt_routes.plan.decision``): explain renders it. A derived record: a
        disk that refuses it fails nothing (explain then derives the decision from the trials, and says so)."""
        job, trials, search = tuning.job, tuning.trials, tuning.search
        if search is None and job.expression is not None and job.catalog is not None:  # a reselection
            search = job_search(job, self.cache, trials)
        known = outcomes(trials, job.tolerance, self.runner.lookup)
        made = decisions.decision(job, self.cache, sel, pending, search, known)
        with contextlib.suppress(sqlite3.Error, CacheError):
            decisions.store(self.cache, job, made)

    # -- search budget (trt_routes.search.job) --------------------------------------------------------
    def job_search(self, job: Job, trials: dict[str, TrialRecord]) -> JobSearch:
        """The job's strategy, warm-started and under its budget (recorded as it starts)."""
        return job_search(job, self.cache, trials, running=True)

    def search_done(self, job: Job, search: Search, trials: dict[str, TrialRecord]) -> None:
        if isinstance(search, JobSearch):
            finish_search(self.cache, job, search, outcomes(trials, job.tolerance, self.runner.lookup))


def warmup_tasks(plan: Plan) -> list[WarmupTask]:
    """One warm-up per backend and target device among the jobs to tune (``Executor.warm``)."""
    return warmups(jp.job for jp in plan.jobs if jp.action == PlanAction.TUNE)


def apply(project: Project, options: ApplyOptions | None = None, reporter: Reporter | None = None,
          executor_factory: Callable[[], Executor] | None = None,
          check_plan: Callable[[Plan, CacheStore, Lockfile], None] | None = None) -> ApplyResult:
    """Bring caches, engines and tuning.lock in line with the manifest.

    ``check_plan`` sees the plan under the project lock before anything is written and may refuse it
    by raising (a saved plan that went stale: ``trt_routes.plan.saved``).

    ``executor_factory`` defaults to the executor ``options`` and the manifest's ``execution`` ask for."""
    options = options or ApplyOptions()
    reporter = reporter or SilentReporter()
    timings = Timings()
    timings("apply_start")
    try:
        return _apply(project, options, reporter, executor_factory, check_plan, timings)
    finally:
        timings("apply_end")
        timings.flush()


def _apply(project: Project, options: ApplyOptions, reporter: Reporter,
           executor_factory: Callable[[], Executor] | None,
           check_plan: Callable[[Plan, CacheStore, Lockfile], None] | None, timings: Timings) -> ApplyResult:
    # a dry run writes nothing: no project lock, no cache or memo file, no worker; the executor's environment
    # is still set up (it decides the jobs' keys: CPU sharing, a Ray cluster's hardware)
    dry = options.dry_run
    with contextlib.nullcontext() if dry else exclusive(project):
        if executor_factory is None:
            from trt_routes.execute.config import execution_config, prepare

            executor_factory = prepare(project, execution_config(
                project, options.workers, options.executor, options.address))
        cache = project.read_cache() if dry else project.open_cache()
        try:
            lock = project.read_lock(remember=not dry)
            if options.retry_failed and not dry:
                from trt_routes.tune.retry import forget_failed

                for name, count in forget_failed(project, cache, options.only).items():
                    reporter.message(f"{name}: {count} crashed or timed-out trial(s) will run again")
            set_aside: dict[str, LockEntry] = {}
            if options.remeasure and not dry:
                from trt_routes.tune.retry import forget_decisions

                set_aside = forget_decisions(project, cache, lock, options.only)
                for name in set_aside:
                    reporter.message(f"{name}: its decision will be taken again, side by side afresh")
            plan = compute_plan(project, cache, lock, options.only)
            if not dry:
                memo.save()  # what resolving the jobs derived (a catalog, model graphs), for later commands
            timings("plan_done")
            if check_plan is not None:
                check_plan(plan, cache, lock)
            reporter.plan(plan)
            result = ApplyResult(plan=plan)
            if dry:
                return result
            with executor_factory() as executor:
                executor.warm(warmup_tasks(plan))
                timings("executor_ready")
                applier = Applier(project, cache, lock, reporter, options, executor)
                applier.timings = timings
                for jp in plan.jobs:
                    if jp.action == PlanAction.UP_TO_DATE:
                        result.outcomes.append(JobOutcome(job=jp.job, action=jp.action, reused=jp.reused,
                                                          lock_entry=lock.jobs.get(jp.job.name)))
                idle = (PlanAction.BLOCKED, PlanAction.SKIPPED, PlanAction.UP_TO_DATE)
                run = [jp for jp in plan.jobs if jp.action not in idle]
                for outcome in applier.tune_jobs(run, options.keep_going):
                    result.outcomes.append(outcome)
                    reporter.job_done(outcome)
                    if outcome.error and not options.keep_going:
                        result.stopped_early = True
                order = {jp.job.name: i for i, jp in enumerate(plan.jobs)}
                result.outcomes.sort(key=lambda o: order.get(o.job.name, len(order)))
                timings("jobs_done")
                for name in plan.removed:
                    lock.jobs.pop(name, None)
                for name, entry in set_aside.items():  # a new decision that failed keeps the old one
                    lock.jobs.setdefault(name, entry)
                t0 = time.perf_counter()
                lock.write()
                timings("lock_write", s=time.perf_counter() - t0)
                result.lock_written = lock.writes > 0
                _settle(project, cache, plan, run)
            return result
        except sqlite3.Error as exc:  # a write of the coordinator's own (search state, decisions) met the disk
            raise database_error(exc, project.cache_path) from exc
        finally:
            cache.close()
