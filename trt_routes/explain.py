"""explain(): why a job's route was chosen, from the cache, the lockfile and the decision log."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from trt_routes.cache.store import TrialRecord
from trt_routes.errors import UsageError
from trt_routes.jobs import Job
from trt_routes.plan import outcomes
from trt_routes.project import LossLookupFromBlobs, Project
from trt_routes.search import cached_search
from trt_routes.select import DEFAULT_ROUTE, Selection, select


@dataclass
class Explanation:
    job: Job
    selection: Selection | None
    trials: list[TrialRecord]
    lock: dict[str, Any] | None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    signature: dict[str, str] | None = None
    other_groups: int = 0

    def to_json(self) -> dict[str, Any]:
        sel = self.selection
        verdicts = {v.route: v for v in sel.verdicts} if sel else {}
        return {
            "job": self.job.name,
            "rule": sel.rule if sel else None,
            "summary": sel.summary if sel else "no trials measured under this job's current signature",
            "winner": sel.winner if sel else None,
            "default_ms": sel.default_ms if sel else None,
            "chosen_ms": sel.chosen_ms if sel else None,
            "speedup": sel.speedup if sel else None,
            "tolerance": {"name": self.job.tolerance_name, **self.job.tolerance.model_dump(mode="json")},
            "trials": [
                {"route": t.route, "status": t.status, "median_ms": t.median_ms,
                 "ci_ms": [t.ci_low, t.ci_high], "losses": t.losses, "build_s": t.build_s,
                 "error": t.error or None, "created_at": t.created_at, "host": t.host, "source": t.source,
                 "verdict": verdicts[t.route].reason if t.route in verdicts else "not a candidate now"}
                for t in self.trials
            ],
            "signature": self.signature,
            "lock": self.lock,
            "history": self.decisions,
            "trials_under_other_signatures": self.other_groups,
        }


def find_job(project: Project, name: str) -> Job:
    matches = [j for j in project.jobs if j.name == name] or \
              [j for j in project.jobs if fnmatch.fnmatchcase(j.name, name)]
    if len(matches) != 1:
        import difflib

        names = [j.name for j in project.jobs]
        close = difflib.get_close_matches(name, names, n=3)
        raise UsageError(
            f"no job named '{name}'" if not matches else f"'{name}' matches {len(matches)} jobs",
            f"did you mean {' or '.join(close)}?" if close else f"jobs: {', '.join(names)}",
        )
    return matches[0]


def explain(project: Project, name: str) -> Explanation:
    job = find_job(project, name)
    lock = project.read_lock().jobs.get(job.name)
    with project.open_cache() as cache:
        trials = cache.group(job.group_key) if not job.blocked else {}
        sel = None
        if trials and job.expression is not None and job.catalog is not None:
            lookup = LossLookupFromBlobs(cache, project.store)
            search = cached_search(job.strategy.mode, job.expression, job.catalog)
            cands = [DEFAULT_ROUTE, *search.candidates(outcomes(trials, job.tolerance, lookup))]
            sel = select(trials, cands, job.tolerance, lookup)
        all_trials = cache.trials_for_job(job.name)
        other = len({t.group_key for t in all_trials} - {job.group_key})
        ordered = sorted(trials.values(), key=lambda t: (t.median_ms is None, t.median_ms or 0, t.route))
        return Explanation(job=job, selection=sel, trials=ordered, lock=lock,
                           decisions=cache.decisions(job.name),
                           signature=job.signature.fields if job.signature else None, other_groups=other)
