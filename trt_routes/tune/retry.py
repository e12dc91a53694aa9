"""Failed trials that are not facts about a route: infrastructure failures are never cached, and
``apply --retry-failed`` forgets cached crashed and timed-out trials so that they run again."""

from __future__ import annotations

from trt_routes.cache.store import CacheStore
from trt_routes.plan.advice import RETRYABLE
from trt_routes.project import Project


def forget_failed(project: Project, cache: CacheStore, only: list[str] | None) -> dict[str, int]:
    """Delete the cached crashed/timeout trials of the selected jobs (under this machine's keys); job ->
    how many. Build errors and accuracy failures stay: they are what the route does."""
    forgotten: dict[str, int] = {}
    for job in project.select_jobs(only):
        if job.blocked:
            continue
        ids = [t.id for t in cache.group(job.group_key, light=True).values() if t.status in RETRYABLE]
        if ids:
            cache.delete_trials(ids)
            forgotten[job.name] = len(ids)
    return forgotten
