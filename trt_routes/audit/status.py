"""status(): the lockfile against the cache against the engines on disk (and against the manifest's
current job keys, so that a stale lock is not reported as ok). Reads only; builds nothing."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from trt_routes.canonical import file_sha256
from trt_routes.errors import Exit
from trt_routes.gitops.check import engine_path_defect, route_defect
from trt_routes.gitops.frozen import frozen_rebuild
from trt_routes.jobs import Job
from trt_routes.lockfile import LockEngine, LockEntry
from trt_routes.plan.diff import blocked_exit, stale_reasons, tolerance_change
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
    block_kind: str | None = None  # Job.block_kind of a blocked job

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
                rows.append(JobStatus(job.name, "blocked", job.blocked, entry.route if entry else None,
                                      job.block_kind))
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


def status_exit(rows: list[JobStatus]) -> Exit:
    """The exit code of ``status``, as ``plan --check``'s: a job blocked here first (3 when its backend cannot
    load, 2 when it cannot work as written), then 1 for anything to fix or apply, else 0. Blocked is not ok;
    a job whose hardware is absent here (a GPU target on a CPU runner) is skipped, not blocked."""
    blocked = blocked_exit(r.block_kind for r in rows if r.state == "blocked")
    return blocked or (Exit.OK if all(r.state in ("ok", "blocked") for r in rows) else Exit.WORK)
