"""status(): the lockfile against the cache against the engines on disk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trt_routes.canonical import file_sha256
from trt_routes.project import Project


@dataclass(frozen=True)
class JobStatus:
    job: str
    state: str  # ok | no-lock | missing-engine | digest-mismatch | not-in-cache | blocked | orphan-lock
    detail: str
    route: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "state": self.state, "detail": self.detail, "route": self.route}


def status(project: Project) -> list[JobStatus]:
    lock = project.read_lock()
    rows: list[JobStatus] = []
    with project.open_cache() as cache:
        for job in project.jobs:
            entry = lock.jobs.get(job.name)
            if job.blocked:
                rows.append(JobStatus(job.name, "blocked", job.blocked, entry.get("route") if entry else None))
                continue
            if entry is None:
                rows.append(JobStatus(job.name, "no-lock", "no lock entry: run `trt-routes apply`"))
                continue
            route = entry.get("route")
            engine = entry.get("engine") or {}
            path = project.root / engine.get("path", "")
            if not path.is_file():
                rows.append(JobStatus(job.name, "missing-engine", f"engine missing at {engine.get('path')}", route))
            elif file_sha256(path) != engine.get("sha256"):
                rows.append(JobStatus(job.name, "digest-mismatch",
                                      f"{engine.get('path')} does not match the locked sha256", route))
            elif cache.get(entry.get("trial", "")) is None:
                rows.append(JobStatus(job.name, "not-in-cache",
                                      "the locked trial is not in this cache (engine ok; evidence elsewhere)",
                                      route))
            else:
                rows.append(JobStatus(job.name, "ok", "engine matches the lock", route))
    names = {j.name for j in project.jobs}
    for name in sorted(set(lock.jobs) - names):
        rows.append(JobStatus(name, "orphan-lock", "locked job no longer in the manifest (apply removes it)",
                              lock.jobs[name].get("route")))
    return rows
