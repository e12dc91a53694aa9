"""Failed trials that are not facts about a route: infrastructure failures are never cached, and
``apply --retry-failed`` forgets cached crashed and timed-out trials so that they run again."""

from __future__ import annotations

from trt_routes.cache.store import CacheStore
from trt_routes.lockfile import LockEntry, Lockfile
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


def forget_decisions(project: Project, cache: CacheStore, lock: Lockfile,
                     only: list[str] | None) -> dict[str, LockEntry]:
    """``apply --remeasure``: the selected jobs' side-by-side re-measurements are deleted and their lock entries
    set aside, so the plan decides them again from their trials, side by side afresh (a decision made on a busy
    host stays otherwise: a locked winner is replaced only by a route that beats it side by side). Returns the
    entries set aside, for apply to put back where the new decision fails."""
    set_aside: dict[str, LockEntry] = {}
    for job in project.select_jobs(only):
        if job.blocked:
            continue
        with cache.conn:
            cache.conn.execute("DELETE FROM remeasurements WHERE group_key = ?", [job.group_key])
        entry = lock.jobs.pop(job.name, None)
        if entry is not None:
            set_aside[job.name] = entry
    return set_aside
