"""apply(): execute a plan. Runs missing trials in isolated workers, writes each trial to the
cache as it finishes, selects, materializes engines and rewrites the lockfile atomically."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from filelock import FileLock, Timeout

from trt_routes import canonical
from trt_routes.backends import registry
from trt_routes.cache import facts
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.errors import Exit, UsageError
from trt_routes.execute.base import Executor
from trt_routes.execute.protocol import settle_spec
from trt_routes.execute.tasks import ReferenceTask, RemeasureTask, TaskResult, TrialTask, WarmupTask
from trt_routes.jobs import Job
from trt_routes.lockfile import Lockfile
from trt_routes.measure import timing_stats
from trt_routes.plan.diff import JobPlan, Plan, candidates_key, make_plan, outcomes
from trt_routes.project import LossLookupFromBlobs, Project
from trt_routes.routes import describe, route_dict
from trt_routes.search import Search
from trt_routes.search.job import JobSearch, finish_search, job_search, selection_key
from trt_routes.selection.confirm import Remeasurement, Request, remeasure_key, schedule
from trt_routes.selection.final import final_selection
from trt_routes.selection.rank import DEFAULT_ROUTE, Selection, select
from trt_routes.share.remote import fetch_blob

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


class SilentReporter:
    def plan(self, plan: Plan) -> None: ...
    def job_start(self, job: Job, builds: int) -> None: ...
    def trial_done(self, job: Job, trial: TrialRecord) -> None: ...
    def job_done(self, outcome: JobOutcome) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass
class ApplyOptions:
    only: list[str] = field(default_factory=list)
    keep_going: bool = False
    dry_run: bool = False
    workers: int | None = None  # None: the manifest's execution.workers (default: every matching GPU, 1 CPU)
    executor: str | None = None  # local | ray (None: the manifest's)
    address: str | None = None  # ray cluster address

    # -- which flags of `trt-routes apply` combine: the rule lives here, the CLI only parses --
    @classmethod
    def from_flags(cls, *, only: list[str] | None = None, keep_going: bool = False, dry_run: bool = False,
                   workers: int | None = None, executor: str | None = None, address: str | None = None,
                   frozen: bool = False, plan: bool = False) -> ApplyOptions:
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
        return cls(only=list(only or []), keep_going=keep_going, dry_run=dry_run, workers=workers,
                   executor=executor, address=address)


@dataclass
class JobOutcome:
    job: Job
    action: str
    built: int = 0
    reused: int = 0
    failed: int = 0
    selection: Selection | None = None
    entry: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


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
        if any(j.action == "blocked" and j.job.block_kind == "unavailable" for j in self.plan.jobs):
            return EXIT_UNAVAILABLE
        if any(j.action == "blocked" for j in self.plan.jobs):
            return EXIT_USAGE
        return EXIT_OK

    @property
    def built(self) -> int:
        return sum(o.built for o in self.outcomes)


def project_lock(project: Project) -> FileLock:
    project.cache_path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(project.cache_path) + ".lock")


def compute_plan(project: Project, cache: CacheStore, lock: Lockfile, only: list[str] | None = None) -> Plan:
    jobs = project.select_jobs(only)
    plan = make_plan(jobs, cache, lock, project.root, LossLookupFromBlobs(cache, project.store))
    if only:
        plan.removed = []  # a filtered run never drops other jobs' lock entries
    return plan


def to_record(job: Job, route: str, result: TaskResult) -> TrialRecord:
    # summarized here rather than in the worker: with the next trial queued behind this one, the worker is
    # already building it while the coordinator does this
    stats = timing_stats(result.samples, seed=job.measurement.seed,
                         block=job.measurement.iterations) if result.samples and result.status == "ok" else None
    return TrialRecord(
        id=job.trial_id(route), group_key=job.group_key, job=job.name, route=route,
        signature=job.signature.hash if job.signature else "", backend=job.backend,
        status=result.status if result.status != "ok" or stats else "crashed",
        median_ms=stats.median if stats else None, ci_low=stats.ci_low if stats else None,
        ci_high=stats.ci_high if stats else None, mean_ms=stats.mean if stats else None,
        stdev_ms=stats.stdev if stats else None, samples=[float(f"{s:.6g}") for s in result.samples],
        losses=result.losses, error=result.error, log=result.log[-20000:], build_s=result.build_s,
        measure_s=result.measure_s, engine_sha256=result.engine_sha256,
        outputs_sha256=result.outputs_sha256, meta=result.meta, **job.key_parts(),
    )


class Applier:
    """Runs one apply over a project with one executor and one open cache."""

    def __init__(self, project: Project, cache: CacheStore, lock: Lockfile, reporter: Reporter,
                 options: ApplyOptions, executor: Executor) -> None:
        self.project = project
        self.cache = cache
        self.lock = lock
        self.reporter = reporter
        self.options = options
        self.executor = executor
        self.store = project.store
        self.lookup = LossLookupFromBlobs(cache, self.store)
        self._last_write = time.monotonic()

    # -- references ------------------------------------------------------------------------
    def reference(self, job: Job) -> tuple[str, str]:
        """(inputs sha, outputs sha) of the job's reference data, computed once and cached."""
        known = self.known_reference(job)
        if known is not None:
            return known
        return self.reference_done(job, self.executor.run(self.reference_task(job), job.measurement.timeout_s))

    def known_reference(self, job: Job) -> tuple[str, str] | None:
        """The job's reference if it needs no run: cached with its blobs, or the manifest's own files."""
        cached = self.cache.reference(job.reference_key)
        if cached and self.store.has(cached[0]) and self.store.has(cached[1]):
            return cached
        if job.reference_shas is not None:
            ref = job.reference
            ins = self.store.put_file(self.project.loaded.resolve(ref.inputs))  # type: ignore[union-attr]
            outs = self.store.put_file(self.project.loaded.resolve(ref.outputs))  # type: ignore[union-attr]
            self.cache.add_reference(job.reference_key, ins, outs)
            return ins, outs
        return None

    def reference_done(self, job: Job, result: TaskResult) -> tuple[str, str]:
        """Cache a reference run's result; _JobFailed when it failed."""
        if result.status != "ok":
            raise _JobFailed(f"reference run failed ({result.status}): {result.error}")
        self.cache.add_reference(job.reference_key, result.inputs_sha256, result.outputs_sha256)
        return result.inputs_sha256, result.outputs_sha256

    def reference_task(self, job: Job) -> ReferenceTask:
        return ReferenceTask(backend=job.backend, spec=job.build_spec({}), store_root=str(self.store.root),
                             inputs=job.inputs, seed=job.measurement.seed)

    # -- trials ----------------------------------------------------------------------------
    def trial_task(self, job: Job, route: str, ref: tuple[str, str]) -> TrialTask:
        return TrialTask(
            backend=job.backend, spec=job.build_spec(route_dict(route)), store_root=str(self.store.root),
            inputs_sha=ref[0], reference_sha=ref[1], l0_params=job.l0_params,
            warmup=job.measurement.warmup, iterations=job.measurement.iterations,
            repeats=job.measurement.repeats, seed=job.measurement.seed,
            settle=settle_spec(job.measurement.settle),
        )

    def run_trial(self, job: Job, route: str, ref: tuple[str, str]) -> TrialRecord:
        result = self.executor.run(self.trial_task(job, route, ref), job.measurement.timeout_s)
        return self.record(job, route, result)

    def record(self, job: Job, route: str, result: TaskResult) -> TrialRecord:
        """The one place a trial result becomes a cache row (the coordinator is the only writer)."""
        record = to_record(job, route, result)
        self.cache.add_trial(record, job.signature.fields if job.signature else None)
        self.reporter.trial_done(job, record)
        return record

    # -- tuning several jobs at once ----------------------------------------------------------------
    def tune_jobs(self, jps: list[JobPlan], keep_going: bool) -> Iterator[JobOutcome]:
        """Run ``jps`` in plan order and yield each one's outcome as it finishes.

        Jobs start one after another, but a job does not hold the executor to itself until it is done:
        when the running jobs have what they want in flight (a search's last trials, a step's results it
        must wait for, a reference being computed) and the executor still has a free worker for the next
        job's target, the next job starts there, with its reference run. Free workers go to running jobs
        first, in plan order, except that a job with no trial yet runs its first one alone while another
        job can use the workers: that first build fills the compile caches (Inductor's kernels, a
        TensorRT timing cache) its other routes reuse, where routes built side by side from cold would
        each compile everything. Only jobs with the very same target overlap (a CPU job never shares the host
        with GPU compilations it did not share before); with one worker nothing overlaps. Results are
        recorded as they arrive, whichever job they belong to; a finished search's side-by-side
        confirmation runs as tasks too, so other jobs' trials go on meanwhile. When a job fails and ``keep_going`` is
        off, nothing new starts; jobs already running stop proposing, what they have in flight is
        recorded, and those cut short are left unlocked (their trials are cached for the next apply); a
        job that had everything it needed is locked."""
        pending = deque(jps)
        active: list[_Tuning] = []
        stop = False
        while True:
            for tuning in list(active):  # running jobs propose in plan order; finished ones finish
                tuning.aborted |= stop
                force = not any(t.running for t in active)
                if tuning.raw is None:
                    self.propose(tuning, force)
                    if not tuning.searching and not tuning.aborted and tuning.error is None:
                        self.begin_selection(tuning)
                if tuning.raw is not None:
                    self.confirm(tuning, force)
                if tuning.searching:
                    continue
                active.remove(tuning)
                if tuning.aborted and tuning.error is None and (tuning.raw is None or tuning.confirm_cut):
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
                self.take_reference(tuning, result, active)
                continue
            if ticket == tuning.remeasure_ticket:
                self.take_remeasurement(tuning, result)
                continue
            route = tuning.in_flight.pop(ticket)
            tuning.trials[route] = self.record(tuning.job, route, result)
            tuning.built += 1
            tuning.fresh = True

    def overlaps(self, job: Job, active: list[_Tuning]) -> bool:
        """``job`` may start beside the ``active`` ones: the same target, and a worker free for it."""
        return all(t.job.target_data == job.target_data for t in active) and \
            self.executor.free_slots(job.target_data) > 0

    def start(self, jp: JobPlan, active: list[_Tuning]) -> _Tuning:
        """A job, started: a tune job's search (its reference known, being computed for another job with
        the same reference, or submitted now); any other job (a reselection) has nothing to run."""
        job = jp.job
        tuning = _Tuning(jp, time.perf_counter(), self.cache.group(job.group_key))
        if jp.action != "tune":
            return tuning
        assert job.expression is not None and job.catalog is not None
        tuning.search = self.job_search(job, tuning.trials)
        self.reporter.job_start(job, len(jp.to_build))
        tuning.ref = self.known_reference(job)
        if tuning.ref is None and not any(t.job.reference_key == job.reference_key and t.awaits_reference
                                          for t in active):
            tuning.ref_ticket = self.executor.submit(self.reference_task(job), job.measurement.timeout_s)
        return tuning

    def take_reference(self, tuning: _Tuning, result: TaskResult, active: list[_Tuning]) -> None:
        """A reference run came back: it serves every running job with the same reference."""
        tuning.ref_ticket = None
        try:
            ref: tuple[str, str] | None = self.reference_done(tuning.job, result)
            error = None
        except _JobFailed as exc:
            ref, error = None, str(exc)
        for other in active:
            if other.awaits_reference and other.job.reference_key == tuning.job.reference_key:
                other.ref, other.error = ref, error

    def propose(self, tuning: _Tuning, force: bool, first_alone: bool = True) -> None:
        """Dispatch what the job's search wants measured, as far as free workers allow (one worker: one at
        a time, in the search's order). The search is asked again only after a result of this job came in,
        so an adaptive search sees every finished trial before proposing more. When it keeps what it
        proposes (``Search.keeps_proposals``), its routes may also wait in a busy worker's queue
        (``Executor.queue_room``), so that worker starts the next as soon as it is done. ``force``: nothing
        runs anywhere, so one route is submitted even without a free worker (an executor without a
        matching worker then says so, instead of the search ending silently). ``first_alone``: a job with no
        trial yet dispatches nothing beside its first one (``tune_jobs`` lifts that when no other job can
        use the free workers)."""
        if tuning.stopped or tuning.aborted or tuning.error is not None or tuning.search is None:
            tuning.batch = []
            return
        if tuning.ref is None:
            return  # its reference is being computed
        job, trials, in_flight = tuning.job, tuning.trials, tuning.in_flight
        batch = tuning.batch
        if tuning.fresh:
            batch = tuning.search.next_batch(outcomes(trials, job.tolerance, self.lookup))
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
        tuning.stopped = not self.dispatch(job, batch[:room], ref, in_flight, budget, tuning.built)
        if not tuning.stopped and tuning.search.keeps_proposals:
            ahead = batch[room:room + self.executor.queue_room(job.target_data)]
            tuning.stopped = not self.dispatch(job, ahead, ref, in_flight, budget, tuning.built)
        running = set(in_flight.values())
        tuning.batch = [] if tuning.stopped else [r for r in batch if r not in running]

    def dispatch(self, job: Job, routes: list[str], ref: tuple[str, str], in_flight: dict[int, str],
                 budget: int | None, built: int) -> bool:
        """Submit ``routes`` in order; False when the budget stopped it (what runs may finish, nothing
        more is proposed). Trials in flight count against the budget; the default route always runs."""
        for route in routes:
            if budget is not None and built + len(in_flight) >= budget and route != DEFAULT_ROUTE:
                return False
            task = self.trial_task(job, route, ref)
            in_flight[self.executor.submit(task, job.measurement.timeout_s)] = route
        return True

    def begin_selection(self, tuning: _Tuning) -> None:
        """The job's search is over: its candidates, the raw selection, and the side-by-side
        re-measurements that confirmation still lacks (run as tasks like trials, ``confirm``)."""
        jp, trials, search, job = tuning.jp, tuning.trials, tuning.search, tuning.job
        if search is not None:
            self.search_done(job, search, trials)
            cands = [DEFAULT_ROUTE, *search.candidates(outcomes(trials, job.tolerance, self.lookup))]
            tuning.cands = [r for r in dict.fromkeys(cands) if r in trials]
        else:
            tuning.cands = list(jp.candidates)
        tuning.raw = select(trials, tuning.cands, job.tolerance, self.lookup)
        self.next_confirmation_round(tuning)

    def next_confirmation_round(self, tuning: _Tuning) -> None:
        """The re-measurements the selection still lacks: against the default, then possibly against the
        locked winner (at most three rounds); stored as they come, so a later apply or plan re-decides
        without measuring (``trt_routes.selection.final``)."""
        assert tuning.raw is not None
        if tuning.confirm_rounds >= 3:
            return
        tuning.confirm_rounds += 1
        _, tuning.requests = final_selection(tuning.job, tuning.trials, [], self.cache,
                                             self.lock.jobs.get(tuning.job.name), raw=tuning.raw)

    def confirm(self, tuning: _Tuning, force: bool) -> None:
        """Start the job's next side-by-side re-measurement where a worker is free (``force``: nothing runs
        anywhere)."""
        if tuning.aborted and tuning.requests:
            tuning.requests, tuning.confirm_cut = [], True
        if not tuning.requests or tuning.remeasure_ticket is not None:
            return
        if self.executor.free_slots(tuning.job.target_data) < 1 and not force:
            return
        task = self.remeasure_task(tuning.job, tuning.trials, tuning.requests[0])
        if isinstance(task, str):
            self.confirmation_failed(tuning, task)
            return
        engines = 1 + len(tuning.requests[0].challengers)  # the baseline and its challengers
        tuning.remeasure_ticket = self.executor.submit(task, tuning.job.measurement.timeout_s * (1 + engines))

    def take_remeasurement(self, tuning: _Tuning, result: TaskResult) -> None:
        """Store a side-by-side re-measurement that came back; the next round when this one is done."""
        tuning.remeasure_ticket = None
        request = tuning.requests.pop(0)
        job, settings = tuning.job, tuning.job.strategy.confirm
        assert settings is not None
        if result.status != "ok":
            self.confirmation_failed(tuning, f"{result.status}: {result.error}")
            return
        meta = {k: v for k, v in result.meta.items() if k != "slots"}
        m = Remeasurement(request.baseline, request.challengers,
                          tuple((r, float(t)) for r, t in result.meta["slots"]), meta)
        facts.add_remeasurement(self.cache, remeasure_key(job.group_key, request.baseline, request.challengers,
                                                          settings), job.group_key, job.name, m.to_json())
        if not tuning.requests:
            self.next_confirmation_round(tuning)

    def confirmation_failed(self, tuning: _Tuning, why: str) -> None:
        self.reporter.message(f"{tuning.job.name}: side-by-side re-measurement failed ({why}); "
                              "the raw selection stands for this run")
        tuning.requests, tuning.confirm_failed = [], True

    def remeasure_task(self, job: Job, trials: dict[str, TrialRecord], request: Request) -> RemeasureTask | str:
        """The task that re-measures ``request`` side by side in one worker (engines the store lacks are
        fetched or rebuilt first); or why it cannot run."""
        settings = job.strategy.confirm
        assert settings is not None
        routes = [request.baseline, *request.challengers]
        ref = self.reference(job)
        for route in routes:
            sha = trials[route].engine_sha256
            if not self.store.has(sha) and not fetch_blob(self.cache, self.store, sha, self.reporter.message):
                trials[route] = self.run_trial(job, route, ref)
                if trials[route].status != "ok":
                    return f"rebuilding {describe(route)} failed: {trials[route].error}"
        engines = tuple((r, job.build_spec(route_dict(r)), trials[r].engine_sha256) for r in routes)
        return RemeasureTask(
            backend=job.backend, spec=engines[0][1], store_root=str(self.store.root), inputs_sha=ref[0],
            engines=engines, order=tuple(schedule(request.baseline, request.challengers, settings.rounds)),
            iterations=settings.iterations, warmup=job.measurement.warmup,
            settle=settle_spec(job.measurement.settle), slot_ms=settings.slot_ms)

    def finish(self, tuning: _Tuning) -> JobOutcome:
        """Decide (after confirmation), materialize the winner's engine and lock it."""
        jp, trials, job, cands = tuning.jp, tuning.trials, tuning.job, tuning.cands
        outcome = JobOutcome(job=job, action=jp.action)
        try:
            if tuning.error is not None:
                raise _JobFailed(tuning.error)
            assert tuning.raw is not None
            outcome.built = tuning.built
            outcome.reused = sum(1 for r in cands if r in trials) - tuning.built
            outcome.failed = sum(1 for r in cands if r in trials and trials[r].status != "ok")
            sel = tuning.raw if tuning.confirm_failed else final_selection(
                job, trials, [], self.cache, self.lock.jobs.get(job.name), raw=tuning.raw)[0]
            outcome.selection = sel
            if sel.winner is None:
                raise _JobFailed(sel.summary)
            winner = trials[sel.winner]
            if not self.store.has(winner.engine_sha256) and not fetch_blob(
                    self.cache, self.store, winner.engine_sha256, self.reporter.message):  # from a cache remote
                self.reporter.message(f"{job.name}: engine of {describe(sel.winner)} is gone from the "
                                      "store; rebuilding it")
                winner = self.run_trial(job, sel.winner, self.reference(job))
                trials[sel.winner] = winner
                outcome.built += 1
                if winner.status != "ok":
                    raise _JobFailed(f"rebuilding the winner failed: {winner.error}")
            outcome.entry = self.lock_entry(job, sel, winner, cands, outcome)
            self.commit(job, outcome.entry, durable=outcome.built > 0)
        except _JobFailed as exc:
            outcome.error = str(exc)
        outcome.seconds = time.perf_counter() - tuning.started
        return outcome

    # -- search budget (trt_routes.search.job) --------------------------------------------------------
    def job_search(self, job: Job, trials: dict[str, TrialRecord]) -> JobSearch:
        """The job's strategy, warm-started and under its budget (recorded as it starts)."""
        return job_search(job, self.cache, trials, running=True)

    def search_done(self, job: Job, search: Search, trials: dict[str, TrialRecord]) -> None:
        if isinstance(search, JobSearch):
            finish_search(self.cache, job, search, outcomes(trials, job.tolerance, self.lookup))

    def lock_entry(self, job: Job, sel: Selection, winner: TrialRecord, cands: list[str],
                   outcome: JobOutcome) -> dict[str, Any]:
        backend = registry.get(job.backend)
        dest = self.project.engine_path(job, backend.engine_suffix_for(job.settings))
        self.store.materialize(winner.engine_sha256, dest)
        previous = self.lock.jobs.get(job.name, {})
        entry_counts = {"candidates": len(cands), "built": outcome.built, "reused": outcome.reused,
                        "failed": outcome.failed}
        if previous.get("route") == sel.winner and previous.get("engine", {}).get("sha256") == \
                winner.engine_sha256 and outcome.built == 0:
            entry_counts = previous.get("trials", entry_counts)  # a reselect that changes nothing
        assert job.signature is not None
        return {
            "backend": job.backend,
            "model": ({"entry": job.entry} if job.entry else {"path": self.project.rel(job.model_path)})
            | {"digest": job.model_digest},
            "profile": job.profile,
            "target": job.target,
            "settings": job.settings,
            "route": sel.winner,
            "status": "ok",
            "trial": winner.id,
            "group_key": job.group_key,
            "keys": job.key_parts(),
            "signature": {"hash": job.signature.hash, "fields": job.signature.fields},
            "tolerance_name": job.tolerance_name,
            "tolerance": canonical.normalize(job.tolerance),
            "tolerance_key": job.tolerance_key,
            "strategy": {"name": job.strategy_name, "mode": job.strategy.mode},
            "candidates_key": candidates_key(cands),
            "timing": {"default_ms": sel.default_ms, "chosen_ms": sel.chosen_ms,
                       "speedup": sel.speedup, "chosen_ci_ms": [winner.ci_low, winner.ci_high]},
            "losses": winner.losses,
            "engine": {"sha256": winner.engine_sha256, "path": self.project.rel(dest),
                       "size": dest.stat().st_size},
            "trials": entry_counts,
            "selection": {"key": selection_key(job), "confirmation": canonical.normalize(sel.confirmation)},
        }

    def commit(self, job: Job, entry: dict[str, Any], durable: bool) -> None:
        """Record the job's lock entry. The lockfile is rewritten (atomically) right away when the job
        built something; cheap reselections are batched to at most one write per second."""
        previous = self.lock.jobs.get(job.name)
        if previous is None or previous.get("route") != entry["route"] or \
                previous.get("engine", {}).get("sha256") != entry["engine"]["sha256"]:
            reason = "first lock" if previous is None else (
                f"winner changed from {describe(previous.get('route') or '')}"
                if previous.get("route") != entry["route"] else "engine rebuilt")
            self.cache.add_decision(job.name, entry["route"], previous.get("route") if previous else None,
                                    reason, entry["engine"]["sha256"])
        self.lock.jobs[job.name] = entry
        if durable or time.monotonic() - self._last_write >= 1.0:
            self.lock.write()
            self._last_write = time.monotonic()


def warmup_tasks(plan: Plan) -> list[WarmupTask]:
    """One warm-up per backend and target device among the jobs to tune (``Executor.warm``)."""
    tasks: dict[tuple[str, str], WarmupTask] = {}
    for jp in plan.jobs:
        if jp.action == "tune":
            key = (jp.job.backend, canonical.dumps(jp.job.target_data.get("device")))
            tasks.setdefault(key, WarmupTask(backend=jp.job.backend, spec=jp.job.build_spec({})))
    return list(tasks.values())


class _JobFailed(Exception):
    pass


@dataclass(eq=False)
class _Tuning:
    """One job while it runs (``Applier.tune_jobs`` may run several at once)."""

    jp: JobPlan
    started: float
    trials: dict[str, TrialRecord]
    search: Search | None = None  # None: not a tune job (a reselection)
    ref: tuple[str, str] | None = None  # (inputs sha, outputs sha) once known
    ref_ticket: int | None = None  # its reference run, while in flight
    error: str | None = None  # why it cannot go on (its reference run failed)
    in_flight: dict[int, str] = field(default_factory=dict)  # ticket -> route
    built: int = 0
    stopped: bool = False  # the budget stopped it: it proposes nothing more
    aborted: bool = False  # another job failed (without keep_going): it runs nothing more and is not locked
    fresh: bool = True  # a result came in since the search was last asked
    batch: list[str] = field(default_factory=list)  # what the search last proposed that is not running yet
    # once the search is over (begin_selection):
    cands: list[str] = field(default_factory=list)  # the candidates it decides among
    raw: Selection | None = None  # the selection before side-by-side confirmation
    requests: list[Request] = field(default_factory=list)  # re-measurements of this round still to run
    confirm_rounds: int = 0
    remeasure_ticket: int | None = None  # the one in flight
    confirm_failed: bool = False  # a re-measurement failed: the raw selection stands
    confirm_cut: bool = False  # aborted with re-measurements still to run

    @property
    def job(self) -> Job:
        return self.jp.job

    @property
    def awaits_reference(self) -> bool:
        return self.search is not None and self.ref is None and self.error is None

    @property
    def running(self) -> bool:
        """Something of this job is in a worker."""
        return bool(self.in_flight) or self.ref_ticket is not None or self.remeasure_ticket is not None

    def holds(self, ticket: int) -> bool:
        """``ticket`` is this job's: a trial, its reference run or its re-measurement."""
        return ticket in self.in_flight or ticket in (self.ref_ticket, self.remeasure_ticket)

    @property
    def cold(self) -> bool:
        """No trial of its group has finished yet (its first build has the compile caches to fill)."""
        return not self.trials

    @property
    def searching(self) -> bool:
        """Something runs, its reference is awaited, its search wants more than there was room for, or its
        confirmation has re-measurements to run."""
        return self.running or self.awaits_reference or bool(self.batch) or bool(self.requests)


def apply(project: Project, options: ApplyOptions | None = None, reporter: Reporter | None = None,
          executor_factory: Callable[[], Executor] | None = None,
          check_plan: Callable[[Plan, CacheStore, Lockfile], None] | None = None) -> ApplyResult:
    """Bring caches, engines and tuning.lock in line with the manifest.

    ``check_plan`` sees the plan under the project lock before anything is written and may refuse it
    by raising (a saved plan that went stale: ``trt_routes.plan.saved``).

    ``executor_factory`` defaults to the executor ``options`` and the manifest's ``execution`` ask for."""
    options = options or ApplyOptions()
    reporter = reporter or SilentReporter()
    try:
        guard = project_lock(project).acquire(timeout=0)
    except Timeout as exc:
        raise UsageError(f"another `trt-routes apply` is running on {project.cache_path}",
                         "wait for it to finish (or remove a stale .lock file if none is running)") from exc
    with guard:
        if executor_factory is None:
            from trt_routes.execute.config import execution_config, prepare

            executor_factory = prepare(project, execution_config(
                project, options.workers, options.executor, options.address))
        cache = project.open_cache()
        try:
            lock = project.read_lock()
            plan = compute_plan(project, cache, lock, options.only)
            if check_plan is not None:
                check_plan(plan, cache, lock)
            reporter.plan(plan)
            result = ApplyResult(plan=plan)
            if options.dry_run:
                return result
            with executor_factory() as executor:
                executor.warm(warmup_tasks(plan))
                applier = Applier(project, cache, lock, reporter, options, executor)
                for jp in plan.jobs:
                    if jp.action == "up-to-date":
                        result.outcomes.append(JobOutcome(job=jp.job, action=jp.action, reused=jp.reused,
                                                          entry=lock.jobs.get(jp.job.name)))
                run = [jp for jp in plan.jobs if jp.action not in ("blocked", "skipped", "up-to-date")]
                for outcome in applier.tune_jobs(run, options.keep_going):
                    result.outcomes.append(outcome)
                    reporter.job_done(outcome)
                    if outcome.error and not options.keep_going:
                        result.stopped_early = True
                order = {jp.job.name: i for i, jp in enumerate(plan.jobs)}
                result.outcomes.sort(key=lambda o: order.get(o.job.name, len(order)))
            for name in plan.removed:
                lock.jobs.pop(name, None)
            lock.write()
            result.lock_written = lock.writes > 0
            return result
        finally:
            cache.close()
