"""status(): the lockfile against the cache against the engines on disk (and against the manifest's
current job keys, so that a stale lock is not reported as ok). Reads only; builds nothing."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from trt_routes.canonical import file_sha256
from trt_routes.gitops.check import engine_path_defect, route_defect
from trt_routes.gitops.frozen import frozen_rebuild
from trt_routes.jobs import Job
from trt_routes.lockfile import LockEngine, LockEntry
from trt_routes.plan.diff import stale_reasons, tolerance_change
from trt_routes.project import Project


def _stale(job: Job, entry: LockEntry) -> list[str]:
    """Why the lock entry no longer describes this job (empty when it still does)."""
    reasons: list[str] = []
    if entry.group_key != job.group_key:
        reasons += stale_reasons(job, entry.keys or {}, entry.signature_fields) or ["job keys changed"]
    if entry.tolerance_key and entry.tolerance_key != job.tolerance_key:
        reasons.append(tolerance_change(job.tolerance_name, entry.tolerance, job.tolerance))
    return reasons


@dataclass(frozen=True)
class JobStatus:
    job: str
    state: str  # ok | no-lock | invalid-lock | missing-engine | digest-mismatch | stale | not-in-cache | blocked |
    # orphan-lock
    detail: str
    route: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "state": self.state, "detail": self.detail, "route": self.route}


def status(project: Project) -> list[JobStatus]:
    lock = project.read_lock()
    rows: list[JobStatus] = []
    with contextlib.ExitStack() as stack:
        # no cache yet (a fresh clone with a lockfile): report it, do not create one
        cache = stack.enter_context(project.read_cache()) if project.cache_path.exists() else None
        for job in project.jobs:
            entry = lock.jobs.get(job.name)
            if job.blocked:
                rows.append(JobStatus(job.name, "blocked", job.blocked, entry.route if entry else None))
                continue
            if entry is None:
                rows.append(JobStatus(job.name, "no-lock", "no lock entry: run `trt-routes apply`"))
                continue
            route = entry.route
            defects = [d for d in (route_defect(job, route), engine_path_defect(entry, project.root,
                                                                                project.out_dir)) if d]
            if defects:
                rows.append(JobStatus(job.name, "invalid-lock", "; ".join(defects) + ": restore tuning.lock from "
                                      "git, or run `trt-routes apply` to rewrite the entry", route))
                continue
            engine = entry.engine or LockEngine()
            rebuilt: str | None = None  # an engine `apply --frozen` rebuilt from this entry (not bit-reproducible)
            path = project.root / (engine.path or "")
            if not path.is_file():
                rows.append(JobStatus(job.name, "missing-engine", f"engine missing at {engine.path}: "
                                      "`trt-routes apply` materializes it again", route))
            elif file_sha256(path) != engine.sha256 and \
                    not (rebuilt := frozen_rebuild(project, job.name, entry, path)):
                rows.append(JobStatus(job.name, "digest-mismatch",
                                      f"{engine.path} does not match the locked sha256 "
                                      f"{str(engine.sha256)[:12]}: `trt-routes apply` restores it", route))
            elif why := _stale(job, entry):
                rows.append(JobStatus(job.name, "stale", "; ".join(why) + ": run `trt-routes apply`", route))
            elif cache is None or cache.get(entry.trial or "") is None:
                rows.append(JobStatus(job.name, "not-in-cache",
                                      "the locked trial is not in this cache (engine ok; evidence elsewhere: "
                                      "`trt-routes cache pull` or `cache import` brings it)" if cache is not None
                                      else f"no trial cache at {project.rel(project.cache_path)} (engine ok)",
                                      route))
            else:
                rows.append(JobStatus(job.name, "ok", rebuilt or "engine matches the lock", route))
    names = {j.name for j in project.jobs}
    for name in sorted(set(lock.jobs) - names):
        rows.append(JobStatus(name, "orphan-lock", "locked job no longer in the manifest (apply removes it)",
                              lock.jobs[name].route))
    return rows
