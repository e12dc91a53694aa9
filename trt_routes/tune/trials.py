"""One job's reference data and trials: the tasks, running them, and the one place a trial result becomes
a cache row. Shared by the coordinator (``trt_routes.tune.apply``) and ``apply --frozen``."""

from __future__ import annotations

from pathlib import Path

from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.meta import TrialMeta
from trt_routes.evidence.noise import Pooled, busy_reason
from trt_routes.execute.base import Executor
from trt_routes.execute.protocol import settle_spec
from trt_routes.execute.tasks import ReferenceTask, TaskResult, TrialTask, reference_task
from trt_routes.jobs import Job
from trt_routes.project import LossLookupFromBlobs, Project
from trt_routes.routes import describe, route_dict
from trt_routes.tune.outcome import Reporter


class JobFailed(Exception):
    """A job cannot be locked: its reference run, the winner's rebuild or a frozen rebuild's check failed.
    The message says which; it becomes the job's ``error``."""


class HostBusy(JobFailed):
    """``measurement.busy: refuse`` and a trial was timed on a busy host: it is not kept, the job fails."""


class NotKept(JobFailed):
    """A trial that must not be cached (its host was busy under ``refuse``, its model changed under it): the
    job fails with the reason, and the next apply measures the route again."""


def _file_state(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def statistics_ready() -> None:
    """Import the trials' statistics (``trt_routes.evidence.measure``: numpy, ~40 ms) now, if not yet. Commands that
    measure nothing do without numpy; apply calls this after submitting a job's reference run (which runs
    meanwhile) and before any trial, whose timing a 40 ms import on the same cores would disturb."""
    import trt_routes.evidence.measure  # noqa: F401


def to_record(job: Job, route: str, result: TaskResult) -> TrialRecord:
    # summarized here rather than in the worker: with the next trial queued behind this one, the worker is
    # already building it while the coordinator does this
    from trt_routes.evidence.measure import timing_stats  # numpy (apply has imported it: ``statistics_ready``)

    timed = result.samples and result.status in (TrialStatus.OK, TrialStatus.ACCURACY_FAILED)
    stats = timing_stats(result.samples, seed=job.measurement.seed, block=job.measurement.iterations) if timed else None
    return TrialRecord(
        id=job.trial_id(route), group_key=job.group_key, job=job.name, route=route,
        signature=job.signature.hash if job.signature else "", backend=job.backend,
        status=result.status if result.status != TrialStatus.OK or stats else TrialStatus.CRASHED,
        median_ms=stats.median if stats else None, ci_low=stats.ci_low if stats else None,
        ci_high=stats.ci_high if stats else None, mean_ms=stats.mean if stats else None,
        stdev_ms=stats.stdev if stats else None, samples=[float(f"{s:.6g}") for s in result.samples],
        losses=result.losses, error=result.error, log=result.log[-20000:], build_s=result.build_s,
        measure_s=result.measure_s, engine_sha256=result.engine_sha256,
        outputs_sha256=result.outputs_sha256, meta=TrialMeta.from_json(result.meta), **job.key_parts(),
    )


class TrialRunner:
    """Computes jobs' references and runs their trials on one executor, recording each in one open cache."""

    def __init__(self, project: Project, cache: CacheStore, reporter: Reporter, executor: Executor) -> None:
        self.project = project
        self.cache = cache
        self.reporter = reporter
        self.executor = executor
        self.store = project.store
        self.lookup = LossLookupFromBlobs(cache, self.store)
        self._busy_warned: set[str] = set()
        self._busy_pooled: dict[str, Pooled] = {}  # per job: its trials too short to judge alone
        #: each model file as the plan hashed it (size, mtime, inode), taken as apply starts: a file that changes
        #: under apply (a git pull, a re-export) would cache trials of new bytes under the old digest
        self._models = {p: _file_state(p) for p in {Path(j.model_path) for j in project.jobs if not j.entry}
                        if p.is_file()}

    def model_changed(self, job: Job) -> str | None:
        """Why the job's model is not the one apply started with, or None."""
        path = Path(job.model_path)
        if path in self._models and _file_state(path) != self._models[path]:
            return (f"the model file {path} changed while apply ran: its trials were not kept (they would be "
                    "cached under the digest of the bytes the plan hashed); run apply again once it stays put")
        return None

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
        """Cache a reference run's result; JobFailed when it failed."""
        if result.status != TrialStatus.OK:
            raise JobFailed(f"reference run failed ({result.status}): {result.error}")
        self.cache.add_reference(job.reference_key, result.inputs_sha256, result.outputs_sha256)
        return result.inputs_sha256, result.outputs_sha256

    def reference_task(self, job: Job) -> ReferenceTask:
        return reference_task(job, str(self.store.root))

    # -- trials ----------------------------------------------------------------------------
    def trial_task(self, job: Job, route: str, ref: tuple[str, str]) -> TrialTask:
        return TrialTask(
            backend=job.backend, spec=job.build_spec(route_dict(route)), store_root=str(self.store.root),
            inputs_sha=ref[0], reference_sha=ref[1], l0_params=job.l0_params,
            warmup=job.measurement.warmup, iterations=job.measurement.iterations,
            repeats=job.measurement.repeats, seed=job.measurement.seed,
            settle=settle_spec(job.measurement.settle), judge_busy=job.measurement.busy.action == "refuse",
        )

    def run_trial(self, job: Job, route: str, ref: tuple[str, str]) -> TrialRecord:
        result = self.executor.run(self.trial_task(job, route, ref), job.measurement.timeout_s)
        return self.record(job, route, result)

    def record(self, job: Job, route: str, result: TaskResult) -> TrialRecord:
        """The one place a trial result becomes a cache row (the coordinator is the only writer)."""
        record = to_record(job, route, result)
        busy = busy_reason(record.meta, job.measurement.busy) if record.status == TrialStatus.OK else None
        if busy is None and record.status == TrialStatus.OK and job.measurement.busy.action == "warn":
            pooled = self._busy_pooled.setdefault(job.name, Pooled())
            pooled.add(record.meta)
            busy = pooled.reason(job.measurement.busy, record.meta)
        if busy is not None and job.measurement.busy.action == "refuse":
            raise HostBusy(f"the trial of {describe(route)} was not kept: {busy} (measurement.busy: refuse; "
                           "tune on a quiet host, or set measurement.busy: warn)")
        if (changed := self.model_changed(job)) is not None:
            raise NotKept(changed)
        if result.infrastructure:  # the machine failed, not the route: not cached, the next apply runs it again
            self.reporter.message(f"{job.name}: {route or '(default route)'}: not cached: {result.error}")
        else:
            self.cache.add_trial(record, job.signature.fields if job.signature else None)
        self.reporter.trial_done(job, record)
        if busy is not None and job.name not in self._busy_warned:
            self._busy_warned.add(job.name)
            self.reporter.message(f"warning: {job.name}: a trial was timed on a busy host: {busy}; timings "
                                  "carry that noise (explain counts them; measurement.busy: refuse to insist)")
        return record
