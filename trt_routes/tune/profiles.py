"""Layer profiles of a job's finalists, taken by ``apply`` once the job is locked (issue 32): the default route,
the baselines, and the winner (when the default was kept: the closest challenger), each one profiled run in a
worker (``ProfileTask``), separate from every timed run, kept as ``<trial id>.json`` beside the cache
(``Project.profiles_dir``), where ``explain --layers`` and the report read them and ``cache push``/bundles carry
them. A trial is a fact, so is its profile: one taken is never taken again. Backends without a profiler are
skipped; a profile that fails is a warning, never the job's failure."""

from __future__ import annotations

__all__ = ["closest_challenger", "finalists", "profile_finalists", "profiles_anything"]

from collections.abc import Iterable, Mapping

from trt_routes.backends import registry
from trt_routes.backends.base import Backend
from trt_routes.cache.store import TrialRecord
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.layers import LayerProfile
from trt_routes.execute.tasks import ProfileTask
from trt_routes.files.artifacts import atomic_write_text
from trt_routes.jobs import Job
from trt_routes.routes import DEFAULT_ROUTE, describe, route_dict
from trt_routes.selection.rank import Selection
from trt_routes.tune.trials import TrialRunner


def closest_challenger(sel: Selection) -> str | None:
    """The fastest eligible route other than the default (what a kept default is compared with), or None."""
    eligible = [v for v in sel.verdicts if v.eligible and v.route != DEFAULT_ROUTE and v.median_ms is not None]
    return min(eligible, key=lambda v: v.median_ms or 0.0).route if eligible else None


def finalists(job: Job, sel: Selection) -> list[str]:
    """The routes a locked job's layer evidence compares: the default, the baselines, and the winner (the closest
    challenger when the default was kept)."""
    other = sel.winner if sel.winner not in (None, DEFAULT_ROUTE) else closest_challenger(sel)
    return list(dict.fromkeys([DEFAULT_ROUTE, *job.baseline_routes, *([other] if other else [])]))


def profiles_anything(backend_name: str) -> bool:
    """The backend has a profiler of its own (``Backend.profile`` overridden)."""
    try:
        backend = registry.get(backend_name)
    except Exception:
        return False
    return type(backend).profile is not Backend.profile


def profile_finalists(runner: TrialRunner, job: Job, trials: Mapping[str, TrialRecord], routes: Iterable[str],
                      inputs_sha: str) -> int:
    """Profile each of ``routes`` that has an ok trial with its engine in the store and no profile yet; returns
    how many were taken."""
    if not profiles_anything(job.backend):
        return 0
    folder = runner.project.profiles_dir
    taken = 0
    for route in dict.fromkeys(routes):
        trial = trials.get(route)
        if trial is None or trial.status != TrialStatus.OK or not runner.store.has(trial.engine_sha256):
            continue
        path = folder / f"{trial.id}.json"
        if path.exists():
            continue
        task = ProfileTask(backend=job.backend, spec=job.build_spec(route_dict(route)),
                           store_root=str(runner.store.root), inputs_sha=inputs_sha, engine_sha=trial.engine_sha256)
        result = runner.executor.run(task, job.measurement.timeout_s)
        if result.status != TrialStatus.OK or "profile" not in result.meta:
            runner.reporter.message(f"{job.name}: no layer profile of {describe(route)} ({result.error or 'none'})")
            continue
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, LayerProfile.from_json(result.meta["profile"]).dumps())
        taken += 1
    return taken
