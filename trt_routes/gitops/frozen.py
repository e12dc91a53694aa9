"""``apply --frozen``: rebuild exactly the locked route of every job from tuning.lock alone (no search),
verify the rebuild and materialize the engine. The lockfile is never rewritten.

What is verified: the route (the backend builds exactly it; TensorRT reads it back), the accuracy gate of
the job's tolerance against a freshly computed reference, a timing sanity check against the locked
interval (when the signature matches), and the engine digest where the backend's builds are
bit-reproducible (ONNX Runtime). Rebuilt digests go to the trial cache and to ``<out>/frozen.json``."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trt_routes import __version__
from trt_routes.backends import registry
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.canonical import file_sha256
from trt_routes.errors import Exit, LockfileError, UsageError
from trt_routes.evidence import TrialStatus
from trt_routes.execute.local import LocalExecutor
from trt_routes.files.artifacts import atomic_write_text
from trt_routes.gitops.check import LockMismatch, lock_mismatches, signature_drift
from trt_routes.jobs import Job
from trt_routes.lockfile import LockEntry, Lockfile
from trt_routes.project import Project, exclusive
from trt_routes.routes import describe
from trt_routes.selection.rank import gate
from trt_routes.tune.outcome import JobOutcome, Reporter, SilentReporter
from trt_routes.tune.trials import JobFailed, TrialRunner

EXIT_OK = Exit.OK  # the table is trt_routes.errors.Exit
EXIT_USAGE = Exit.USAGE
EXIT_UNAVAILABLE = Exit.UNAVAILABLE
EXIT_FAILED = Exit.FAILED
RECORD_NAME = "frozen.json"


class SignatureDrift(LockfileError):
    """This machine's signature differs from the one the lock was tuned under (exit code 2)."""

    def __init__(self, drift: dict[str, list[str]]) -> None:
        lines = "\n".join(f"  {job}: {'; '.join(fields)}" for job, fields in sorted(drift.items()))
        super().__init__(
            f"this machine differs from the one tuning.lock was made on ({len(drift)} job(s)):\n{lines}",
            "the locked routes were chosen and timed under another signature: re-tune here with "
            "`trt-routes apply` and commit the lock, or rebuild them anyway with --allow-signature-drift "
            "(accuracy is still checked; timings are not compared)",
        )
        self.drift = drift


@dataclass
class FrozenOptions:
    only: list[str] = field(default_factory=list)
    allow_signature_drift: bool = False
    keep_going: bool = False
    dry_run: bool = False
    #: A rebuild fails the timing check when its whole interval is slower than this many times the
    #: locked interval's upper end (same signature only).
    max_slowdown: float = 3.0


@dataclass
class FrozenJob:
    """What happened to one job."""

    job: Job
    route: str
    locked_sha256: str
    built: int = 0
    reused: bool = False
    engine_sha256: str = ""
    engine_path: str = ""
    digest: str = ""  # identical | differs (not bit-reproducible) | differs (signature drift)
    drift: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    median_ms: float | None = None
    locked_ms: float | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job.name, "route": self.route, "built": self.built, "reused": self.reused,
                "locked_sha256": self.locked_sha256, "engine_sha256": self.engine_sha256,
                "engine_path": self.engine_path, "digest": self.digest, "signature_drift": self.drift,
                "checks": self.checks, "median_ms": self.median_ms, "locked_ms": self.locked_ms,
                "error": self.error}


@dataclass
class FrozenResult:
    jobs: list[FrozenJob] = field(default_factory=list)
    skipped: list[tuple[Job, str]] = field(default_factory=list)  # (job, why): absent hardware, blocked
    record_path: Path | None = None
    dry_run: bool = False
    stopped_early: bool = False

    @property
    def built(self) -> int:
        return sum(j.built for j in self.jobs)

    @property
    def exit_code(self) -> int:
        if any(j.error for j in self.jobs):
            return EXIT_FAILED
        if any(job.block_kind == "unavailable" for job, _ in self.skipped):
            return EXIT_UNAVAILABLE
        if any(job.block_kind == "invalid" for job, _ in self.skipped):
            return EXIT_USAGE
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "built": self.built, "dry_run": self.dry_run,
                "jobs": [j.to_json() for j in self.jobs],
                "skipped": [{"job": job.name, "reason": why} for job, why in self.skipped],
                "record": str(self.record_path) if self.record_path else None}


def check_frozen(project: Project, lock: Lockfile,
                 options: FrozenOptions) -> tuple[list[FrozenJob], list[tuple[Job, str]]]:
    """Everything that can be refused before building: lockfile present and in line with the manifest,
    a locked route per job, this machine's signature. Returns (runnable, skipped)."""
    if not lock.path.exists():
        raise LockfileError(f"no lockfile at {lock.path}: --frozen builds only what tuning.lock records",
                            "run `trt-routes apply` (without --frozen) to tune and write it, then commit it")
    jobs = project.select_jobs(options.only or None)
    if not jobs:
        raise UsageError(f"no job matches --only {' '.join(options.only)}",
                         "job names are model/shape/target; `trt-routes plan` lists them")
    mismatches = lock_mismatches(jobs, lock, options.only or None)
    if mismatches:
        raise LockMismatch(mismatches, lock.path.name, project.loaded.path.name)
    runnable: list[FrozenJob] = []
    skipped: list[tuple[Job, str]] = []
    drift: dict[str, list[str]] = {}
    for job in jobs:
        if job.blocked:
            skipped.append((job, job.blocked))
            continue
        entry = lock.jobs[job.name]
        fj = FrozenJob(job=job, route=str(entry.route), locked_sha256=entry.engine_sha256,
                       locked_ms=entry.timing.chosen_ms if entry.timing else None,
                       drift=signature_drift(job, entry))
        if fj.drift:
            drift[job.name] = fj.drift
        runnable.append(fj)
    if drift and not options.allow_signature_drift:
        raise SignatureDrift(drift)
    if not runnable and all(job.block_kind == "absent" for job, _ in skipped):
        raise UsageError("nothing to rebuild on this machine: " + "; ".join(
            sorted({why for _, why in skipped})), "run `apply --frozen` on a machine with the jobs' targets, "
                      "or select the jobs of this machine with --only '*/*/TARGET'")
    return runnable, skipped


class FrozenBuilder:
    """Rebuilds and verifies one job at a time (apply's reference and trial logic on one executor)."""

    def __init__(self, project: Project, cache: CacheStore, lock: Lockfile, reporter: Reporter,
                 options: FrozenOptions, executor: LocalExecutor) -> None:
        self.project = project
        self.cache = cache
        self.lock = lock
        self.options = options
        self.reporter = reporter
        self.trials = TrialRunner(project, cache, reporter, executor)

    def _reusable(self, fj: FrozenJob, reproducible: bool) -> TrialRecord | None:
        """This machine's own trial of the locked route, when it is still good (a re-run builds nothing)."""
        trial = self.cache.get(fj.job.trial_id(fj.route))
        if trial is None or trial.status != TrialStatus.OK or not self.project.store.verify(trial.engine_sha256):
            return None
        if reproducible and not fj.drift and trial.engine_sha256 != fj.locked_sha256:
            return None
        if gate(trial, fj.job.tolerance, self.trials.lookup):
            return None
        return trial

    def run(self, fj: FrozenJob) -> FrozenJob:
        job = fj.job
        start = time.perf_counter()
        backend = registry.get(job.backend)
        try:
            trial = self._reusable(fj, backend.reproducible_engines)
            if trial is not None:
                fj.reused = True
            else:
                self.reporter.job_start(job, 1)
                ref = self.trials.reference(job)
                trial = self.trials.run_trial(job, fj.route, ref)
                fj.built = 1
            identity = None
            if trial.status == TrialStatus.OK and trial.engine_sha256 != fj.locked_sha256 and self.project.store.has(
                    trial.engine_sha256):
                identity = backend.engine_identity(self.project.store.path(trial.engine_sha256))
            self.verify(fj, trial, backend.reproducible_engines, backend.name, identity)
            dest = self.project.engine_path(job, backend.engine_suffix_for(job.settings))
            self.project.store.materialize(trial.engine_sha256, dest)
            fj.engine_path = self.project.rel(dest)
        except JobFailed as exc:
            fj.error = str(exc)
        fj.seconds = time.perf_counter() - start
        return fj

    def verify(self, fj: FrozenJob, trial: TrialRecord, reproducible: bool, backend: str,
               identity: str | None = None) -> None:
        """Route, accuracy, digest (or the engine's structural identity where the backend's bytes are not
        deterministic), timing: raise JobFailed on the first check that fails."""
        if trial.status != TrialStatus.OK or trial.median_ms is None:
            raise JobFailed(f"rebuilding the locked route {describe(fj.route)} failed: {trial.status}: "
                             f"{trial.error or 'no timing'}")
        fj.checks.append(f"route {describe(fj.route)} built as locked")
        fj.engine_sha256 = trial.engine_sha256
        fj.median_ms = trial.median_ms
        if failures := gate(trial, fj.job.tolerance, self.trials.lookup):
            raise JobFailed(f"the rebuilt engine fails tolerance '{fj.job.tolerance_name}': "
                             + "; ".join(failures))
        fj.checks.append(f"accuracy within tolerance '{fj.job.tolerance_name}'")
        locked_identity = self._locked_identity(fj)
        if trial.engine_sha256 == fj.locked_sha256:
            fj.digest = "identical"
            fj.checks.append("engine digest identical to the lock")
        elif identity is not None and locked_identity is not None and identity == locked_identity:
            fj.digest = "differs in bytes, identical in structure"
            fj.checks.append(f"engine structure identical to the lock ({backend} names the nodes it inserts "
                             "differently in every build; the new digest is recorded)")
        elif identity is not None and locked_identity is not None and not fj.drift:
            raise JobFailed(f"the rebuilt engine's graph differs from the locked one (structure {identity[-12:]} "
                             f"against {locked_identity[-12:]}): the lock or the model was edited by hand, or "
                             f"{backend} optimizes differently here")
        elif reproducible and not fj.drift:
            hint = (" (this lock predates structural identities: `trt-routes apply` records one)"
                    if identity is not None and locked_identity is None else "")
            raise JobFailed(f"the rebuilt engine {trial.engine_sha256[:12]} differs from the locked "
                             f"{fj.locked_sha256[:12]}, though {backend} builds are reproducible on one "
                             "signature: the lock or the model was edited by hand, or the build is not "
                             f"deterministic here{hint}")
        else:
            fj.digest = "differs (signature drift)" if fj.drift else f"differs ({backend} builds are not " \
                                                                     "bit-reproducible)"
        self._timing(fj, trial)

    def _locked_identity(self, fj: FrozenJob) -> str | None:
        entry = self.lock.jobs.get(fj.job.name)
        return entry.engine.identity if entry is not None and entry.engine is not None else None

    def _timing(self, fj: FrozenJob, trial: TrialRecord) -> None:
        median = trial.median_ms
        if median is None or not math.isfinite(median) or median <= 0:
            raise JobFailed(f"timing of the rebuilt engine is not usable ({median})")
        entry = self.lock.jobs.get(fj.job.name)
        entry_ci = [x for x in (entry.timing.chosen_ci_ms if entry and entry.timing else None) or []
                    if isinstance(x, (int, float))]
        locked_high = max(entry_ci) if entry_ci else fj.locked_ms
        if fj.drift or not locked_high:
            fj.checks.append(f"timing {median:.4g} ms (not compared: "
                             + ("signature differs)" if fj.drift else "no locked timing)"))
            return
        low = trial.ci_low if trial.ci_low is not None else median
        if low > self.options.max_slowdown * locked_high:
            raise JobFailed(f"timing sanity check failed: {median:.4g} ms (interval from {low:.4g}) is more "
                             f"than {self.options.max_slowdown:g}x the locked {fj.locked_ms or locked_high:.4g} "
                             "ms on the same signature; is the machine loaded?")
        fj.checks.append(f"timing {median:.4g} ms vs locked {fj.locked_ms or locked_high:.4g} ms")


def write_record(project: Project, lock: Lockfile, result: FrozenResult) -> Path | None:
    """``<out>/frozen.json``: per job the engine this machine materialized and how it was verified.

    Written only when its content changes; entries of jobs not rebuilt this run are kept."""
    done = [j for j in result.jobs if j.ok and j.engine_sha256]
    if not done:
        return None
    path = project.out_dir / RECORD_NAME
    jobs: dict[str, Any] = {}
    if path.is_file():
        try:
            jobs = dict(json.loads(path.read_text(encoding="utf-8")).get("jobs") or {})
        except (ValueError, AttributeError):
            jobs = {}
    for j in done:
        jobs[j.job.name] = {
            "route": j.route, "backend": j.job.backend,
            "engine": {"path": j.engine_path, "sha256": j.engine_sha256,
                       "size": (project.root / j.engine_path).stat().st_size},
            "locked_sha256": j.locked_sha256, "digest": j.digest, "checks": j.checks,
            "signature": j.job.signature.hash if j.job.signature else "", "signature_drift": j.drift,
        }
    jobs = {k: v for k, v in jobs.items() if k in lock.jobs}
    text = json.dumps({"format": "trt-routes-frozen", "version": 1, "tool_version": __version__,
                       "lockfile_sha256": file_sha256(lock.path), "jobs": dict(sorted(jobs.items()))},
                      indent=2, sort_keys=True) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)
    return path


def frozen_rebuild(project: Project, name: str, entry: LockEntry, path: Path) -> str | None:
    """A line for ``status`` when the engine at ``path`` is the one ``apply --frozen`` rebuilt and verified
    for job ``name`` from this lock entry (a TensorRT rebuild has its own digest); None otherwise."""
    try:
        record = json.loads((project.out_dir / RECORD_NAME).read_text(encoding="utf-8"))
        job = record["jobs"][name]
        sha = file_sha256(path)
        if job["locked_sha256"] != (entry.engine.sha256 if entry.engine else None) or job["route"] != entry.route \
                or job["engine"]["sha256"] != sha:
            return None
        return (f"engine rebuilt from the lock by `apply --frozen` (sha256 {sha[:12]}, {job['digest']}); "
                f"verified: {', '.join(job['checks'])}")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def apply_frozen(project: Project, options: FrozenOptions | None = None, reporter: Reporter | None = None,
                 executor_factory: Callable[[], LocalExecutor] = LocalExecutor) -> FrozenResult:
    """Rebuild, verify and materialize the locked route of every selected job (one build per job)."""
    options = options or FrozenOptions()
    reporter = reporter or SilentReporter()
    lock = project.read_lock()
    runnable, skipped = check_frozen(project, lock, options)
    result = FrozenResult(skipped=skipped, dry_run=options.dry_run)
    if options.dry_run:
        result.jobs = runnable
        return result
    with exclusive(project), project.open_cache() as cache, executor_factory() as executor:
        builder = FrozenBuilder(project, cache, lock, reporter, options, executor)
        for fj in runnable:
            result.jobs.append(builder.run(fj))
            reporter.job_done(JobOutcome(job=fj.job, action="frozen", built=fj.built, reused=int(fj.reused),
                                         error=fj.error, seconds=fj.seconds))
            if fj.ok:
                reporter.message(f"{fj.job.name}: {describe(fj.route)} "
                                 f"{'reused from this cache' if fj.reused else 'rebuilt'} and verified "
                                 f"(engine {fj.digest or 'checked'})")
            elif not options.keep_going:
                result.stopped_early = True
                break
        result.record_path = write_record(project, lock, result)
    return result
