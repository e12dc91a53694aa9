"""The one place a lock entry is built (``LockWriter.entry``) and recorded into tuning.lock
(``LockWriter.commit``, with the decision log in the cache)."""

from __future__ import annotations

import time

from trt_routes import canonical
from trt_routes.backends import registry
from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.facts import batch_of
from trt_routes.jobs import Job
from trt_routes.lockfile import (
    LockEngine,
    LockEntry,
    Lockfile,
    LockModel,
    LockObjective,
    LockSelection,
    LockSignature,
    LockStrategy,
    LockTiming,
    LockTrialCounts,
)
from trt_routes.plan.diff import candidates_key
from trt_routes.project import Project
from trt_routes.routes import describe
from trt_routes.search.job import selection_key
from trt_routes.selection.final import baseline_for
from trt_routes.selection.headline import headline
from trt_routes.selection.rank import Selection, trial_facts
from trt_routes.tune.outcome import JobOutcome


def _facts(sel: Selection, winner: TrialRecord, job: Job) -> dict[str, float]:
    """The winner's facts, 4 significant digits (the lock is for people and diffs)."""
    verdict = sel.verdict(winner.route)
    values = dict(verdict.facts) if verdict is not None and verdict.facts else \
        trial_facts(winner, batch_of(job.inputs))
    return {k: float(f"{v:.4g}") for k, v in sorted(values.items())}


class LockWriter:
    """Builds the jobs' lock entries and writes them to one lockfile."""

    def __init__(self, project: Project, cache: CacheStore, lock: Lockfile) -> None:
        self.project = project
        self.cache = cache
        self.lock = lock
        self._last_write = time.monotonic()

    def entry(self, job: Job, sel: Selection, winner: TrialRecord, cands: list[str],
              outcome: JobOutcome) -> LockEntry:
        """The winner's engine materialized at the job's engine path, and the entry that locks it."""
        backend = registry.get(job.backend)
        dest = self.project.engine_path(job, backend.engine_suffix_for(job.settings))
        self.project.store.materialize(winner.engine_sha256, dest)
        previous = self.lock.jobs.get(job.name)
        counts = LockTrialCounts(candidates=len(cands), built=outcome.built, reused=outcome.reused,
                                 failed=outcome.failed)
        if previous is not None and previous.route == sel.winner and \
                previous.engine_sha256 == winner.engine_sha256 and outcome.built == 0 and "trials" in previous:
            counts = previous.trials  # type: ignore[assignment]  # a reselect that changes nothing
        assert job.signature is not None
        model = LockModel(entry=job.entry, digest=job.model_digest) if job.entry else \
            LockModel(path=self.project.rel(job.model_path), digest=job.model_digest)
        return LockEntry(
            backend=job.backend,
            model=model,
            profile=job.profile,
            target=job.target,
            settings=job.settings,
            route=sel.winner,
            status=TrialStatus.OK,
            trial=winner.id,
            group_key=job.group_key,
            keys=job.key_parts(),
            signature=LockSignature(hash=job.signature.hash, fields=job.signature.fields),
            tolerance_name=job.tolerance_name,
            tolerance=canonical.normalize(job.tolerance),
            tolerance_key=job.tolerance_key,
            strategy=LockStrategy(name=job.strategy_name, mode=job.strategy.mode),
            candidates_key=candidates_key(cands),
            timing=self.timing(job, sel, winner),
            losses=winner.losses,
            engine=LockEngine(sha256=winner.engine_sha256, path=self.project.rel(dest),
                              size=dest.stat().st_size, identity=backend.engine_identity(dest)),
            trials=counts,
            selection=LockSelection(key=selection_key(job), confirmation=canonical.normalize(sel.confirmation)),
            objective=LockObjective(name=job.objective_name, rank=job.objective.rank,
                                    limits=dict(job.objective.limits)) if job.objective is not None else None,
            facts=_facts(sel, winner, job),
        )

    @staticmethod
    def timing(job: Job, sel: Selection, winner: TrialRecord) -> LockTiming:
        """The entry's timing; the baseline's fields only for jobs with a ``baseline:`` (older entries and
        jobs without one keep their bytes)."""
        head = headline(sel)
        timing = LockTiming(default_ms=sel.default_ms, chosen_ms=sel.chosen_ms, speedup=head.speedup,
                            chosen_ci_ms=[winner.ci_low, winner.ci_high], **head.lock_fields())
        if job.baseline or job.baseline_choices:
            route = baseline_for(job, sel)  # best of presets: the fastest eligible listed one
            base = sel.verdict(route)
            base_ms = sel.baseline_ms if sel.baseline_ms is not None else (
                base.median_ms if base is not None and base.status == TrialStatus.OK else None)
            timing.baseline = route
            if job.baseline_choices:
                timing.baseline_source = job.baseline_source_of(route)
            timing.baseline_ms = base_ms
            # confirmed ratio when confirmation compared them, else (it did not run, or failed) the medians'
            timing.baseline_speedup = sel.baseline_speedup or (
                base_ms / sel.chosen_ms if base_ms and sel.chosen_ms else None)
        return timing

    def commit(self, job: Job, entry: LockEntry, durable: bool) -> None:
        """Record the job's lock entry. The lockfile is rewritten (atomically) right away when the job
        built something; cheap reselections are batched to at most one write per second."""
        previous = self.lock.jobs.get(job.name)
        if previous is None or previous.route != entry.route or previous.engine_sha256 != entry.engine_sha256:
            reason = "first lock" if previous is None else (
                f"winner changed from {describe(previous.route or '')}"
                if previous.route != entry.route else "engine rebuilt")
            self.cache.add_decision(job.name, entry.route or "", previous.route if previous else None,
                                    reason, entry.engine_sha256)
        self.lock.jobs[job.name] = entry
        if durable or time.monotonic() - self._last_write >= 1.0:
            self.lock.write()
            self._last_write = time.monotonic()
