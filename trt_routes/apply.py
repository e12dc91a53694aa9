"""apply(): execute a plan. Runs missing trials in isolated workers, writes each trial to the
cache as it finishes, selects, materializes engines and rewrites the lockfile atomically."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from filelock import FileLock, Timeout

from trt_routes import canonical
from trt_routes.backends import registry
from trt_routes.cache import facts
from trt_routes.cache.remote import fetch_blob
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.confirm import Remeasurement, Request, remeasure_key, schedule
from trt_routes.errors import UsageError
from trt_routes.execute.base import Executor
from trt_routes.execute.protocol import settle_spec
from trt_routes.execute.tasks import ReferenceTask, RemeasureTask, TaskResult, TrialTask, WarmupTask
from trt_routes.jobs import Job
from trt_routes.jobsearch import JobSearch, finish_search, job_search, selection_key
from trt_routes.lockfile import Lockfile
from trt_routes.measure import timing_stats
from trt_routes.plan import JobPlan, Plan, candidates_key, make_plan, outcomes
from trt_routes.project import LossLookupFromBlobs, Project
from trt_routes.routes import describe, route_dict
from trt_routes.search import Search
from trt_routes.select import DEFAULT_ROUTE, Selection, select
from trt_routes.selection import final_selection

EXIT_OK, EXIT_WORK, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_FAILED = 0, 1, 2, 3, 4


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
        cached = self.cache.reference(job.reference_key)
        if cached and self.store.has(cached[0]) and self.store.has(cached[1]):
            return cached
        if job.reference_shas is not None:
            ref = job.reference
            ins = self.store.put_file(self.project.loaded.resolve(ref.inputs))  # type: ignore[union-attr]
            outs = self.store.put_file(self.project.loaded.resolve(ref.outputs))  # type: ignore[union-attr]
            self.cache.add_reference(job.reference_key, ins, outs)
            return ins, outs
        result = self.executor.run(self.reference_task(job), job.measurement.timeout_s)
        if result.status != "ok":
            raise _JobFailed(f"reference run failed ({result.status}): {result.error}")
        self.cache.add_reference(job.reference_key, result.inputs_sha256, result.outputs_sha256)
        return result.inputs_sha256, result.outputs_sha256

    def reference_task(self, job: Job) -> ReferenceTask:
        return ReferenceTask(backend=job.backend, spec=job.build_spec({}), store_root=str(self.store.root),
                             inputs=job.inputs, seed=job.measurement.seed)

    def prefetch_references(self, jobs: list[Job]) -> None:
        """Compute the references these jobs lack up front, side by side, where the executor has several
        free workers: each job's reference otherwise runs alone while the other workers wait. A failure
        is left for the job itself to run again and report."""
        if not any(self.executor.free_slots(job.target_data) > 1 for job in jobs):
            return
        todo = [job for job in {j.reference_key: j for j in jobs}.values() if job.reference_shas is None
                and not self.cache.reference(job.reference_key)]
        pending: dict[int, Job] = {}
        while todo or pending:
            while todo and self.executor.free_slots(todo[0].target_data) > 0:
                job = todo.pop(0)
                pending[self.executor.submit(self.reference_task(job), job.measurement.timeout_s)] = job
            if not pending:
                return  # no worker free for the next one: its job computes it
            ticket, result = self.executor.wait()
            job = pending.pop(ticket)
            if result.status == "ok":
                self.cache.add_reference(job.reference_key, result.inputs_sha256, result.outputs_sha256)

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

    def search_loop(self, job: Job, search: Search, trials: dict[str, TrialRecord], ref: tuple[str, str],
                    budget: int | None) -> int:
        """Dispatch the search's missing routes to free workers and record results as they arrive, in
        any order; returns the number of trials built. After each result the search is asked again,
        so an adaptive search sees every finished trial before proposing more; whatever it proposes
        is dispatched as far as free workers allow (one worker: one at a time, in the search's order).
        When the search keeps what it proposes (``Search.keeps_proposals``), its routes may also wait in
        a busy worker's queue (``Executor.queue_room``), so it starts the next as soon as it is done.
        The default route always runs; ``budget`` caps the others (trials in flight count)."""
        in_flight: dict[int, str] = {}
        built = 0
        stopped = False
        while True:
            if not stopped:
                batch = search.next_batch(outcomes(trials, job.tolerance, self.lookup))
                if DEFAULT_ROUTE not in trials and DEFAULT_ROUTE not in batch:
                    batch = [DEFAULT_ROUTE, *batch]
                running = set(in_flight.values())
                batch = [r for r in batch if r not in running and r not in trials]
                # one slot is always tried when nothing runs, so an executor without a matching
                # worker says so instead of the search ending silently
                room = max(self.executor.free_slots(job.target_data), 0 if in_flight else 1)
                stopped = not self.dispatch(job, batch[:room], ref, in_flight, budget, built)
                if not stopped and search.keeps_proposals:
                    ahead = batch[room:room + self.executor.queue_room(job.target_data)]
                    stopped = not self.dispatch(job, ahead, ref, in_flight, budget, built)
            if not in_flight:
                return built
            ticket, result = self.executor.wait()
            route = in_flight.pop(ticket)
            trials[route] = self.record(job, route, result)
            built += 1

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

    def run_job(self, jp: JobPlan) -> JobOutcome:
        job = jp.job
        start = time.perf_counter()
        outcome = JobOutcome(job=job, action=jp.action)
        try:
            trials = self.cache.group(job.group_key)
            built = 0
            if jp.action == "tune":
                assert job.expression is not None and job.catalog is not None
                ref = self.reference(job)
                search = self.job_search(job, trials)
                budget = job.strategy.max_builds
                self.reporter.job_start(job, len(jp.to_build))
                built = self.search_loop(job, search, trials, ref, budget)
                self.search_done(job, search, trials)
                cands = [DEFAULT_ROUTE, *search.candidates(outcomes(trials, job.tolerance, self.lookup))]
                cands = [r for r in dict.fromkeys(cands) if r in trials]
            else:
                cands = list(jp.candidates)
            outcome.built = built
            outcome.reused = sum(1 for r in cands if r in trials) - built
            outcome.failed = sum(1 for r in cands if r in trials and trials[r].status != "ok")
            sel = self.confirm_selection(job, trials, select(trials, cands, job.tolerance, self.lookup))
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
        outcome.seconds = time.perf_counter() - start
        return outcome

    # -- search budget and confirmation (trt_routes.jobsearch, trt_routes.confirm) -------------------
    def job_search(self, job: Job, trials: dict[str, TrialRecord]) -> JobSearch:
        """The job's strategy, warm-started and under its budget (recorded as it starts)."""
        return job_search(job, self.cache, trials, running=True)

    def search_done(self, job: Job, search: Search, trials: dict[str, TrialRecord]) -> None:
        if isinstance(search, JobSearch):
            finish_search(self.cache, job, search, outcomes(trials, job.tolerance, self.lookup))

    def confirm_selection(self, job: Job, trials: dict[str, TrialRecord], sel: Selection) -> Selection:
        """``sel`` after side-by-side confirmation: re-measures what the cache lacks (stored, so a later
        apply or plan re-decides without measuring), then decides (``trt_routes.selection``)."""
        entry = self.lock.jobs.get(job.name)
        for _ in range(3):  # against the default, then possibly against the locked winner
            final, requests = final_selection(job, trials, [], self.cache, entry, raw=sel)
            if not requests:
                return final
            for request in requests:
                failure = self.remeasure(job, trials, request)
                if failure is not None:
                    self.reporter.message(f"{job.name}: side-by-side re-measurement failed ({failure}); "
                                          "the raw selection stands for this run")
                    return sel
        return final

    def remeasure(self, job: Job, trials: dict[str, TrialRecord], request: Request) -> str | None:
        """Run one side-by-side re-measurement in one worker and store it; None, or why it failed."""
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
        task = RemeasureTask(
            backend=job.backend, spec=engines[0][1], store_root=str(self.store.root), inputs_sha=ref[0],
            engines=engines, order=tuple(schedule(request.baseline, request.challengers, settings.rounds)),
            iterations=settings.iterations, warmup=job.measurement.warmup,
            settle=settle_spec(job.measurement.settle), slot_ms=settings.slot_ms)
        result = self.executor.run(task, job.measurement.timeout_s * (1 + len(routes)))
        if result.status != "ok":
            return f"{result.status}: {result.error}"
        meta = {k: v for k, v in result.meta.items() if k != "slots"}
        m = Remeasurement(request.baseline, request.challengers,
                          tuple((r, float(t)) for r, t in result.meta["slots"]), meta)
        facts.add_remeasurement(self.cache, remeasure_key(job.group_key, request.baseline, request.challengers,
                                                          settings), job.group_key, job.name, m.to_json())
        return None

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


def apply(project: Project, options: ApplyOptions | None = None, reporter: Reporter | None = None,
          executor_factory: Callable[[], Executor] | None = None,
          check_plan: Callable[[Plan, CacheStore, Lockfile], None] | None = None) -> ApplyResult:
    """Bring caches, engines and tuning.lock in line with the manifest.

    ``check_plan`` sees the plan under the project lock before anything is written and may refuse it
    by raising (a saved plan that went stale: ``trt_routes.saved_plan``).

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
                applier.prefetch_references([jp.job for jp in plan.jobs if jp.action == "tune"])
                for jp in plan.jobs:
                    if jp.action in ("blocked", "skipped"):
                        continue
                    if jp.action == "up-to-date":
                        result.outcomes.append(JobOutcome(job=jp.job, action=jp.action, reused=jp.reused,
                                                          entry=lock.jobs.get(jp.job.name)))
                        continue
                    outcome = applier.run_job(jp)
                    result.outcomes.append(outcome)
                    reporter.job_done(outcome)
                    if outcome.error and not options.keep_going:
                        result.stopped_early = True
                        break
            for name in plan.removed:
                lock.jobs.pop(name, None)
            lock.write()
            result.lock_written = lock.writes > 0
            return result
        finally:
            cache.close()
