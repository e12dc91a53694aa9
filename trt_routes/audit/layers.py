"""Where a winner's gain comes from: layer profiles of a job's routes (``trt-routes profile``) and the default
against the winner, layer by layer (``trt-routes explain JOB --layers``).

A profile is taken from the trial's own engine (the blob store keeps every built engine) with the job's inputs,
in this process, by the backend's profiler (``Backend.profile``), and kept beside the cache as
``<cache folder>/profiles/<trial id>.json`` (at most ``MAX_PROFILE_BYTES``): a trial is an immutable fact, so
is its profile. When the default route won, the winner's place goes to the closest challenger (the fastest
other eligible route): the comparison then says what the best alternative changed."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trt_routes.audit.explain import Explanation, explain
from trt_routes.backends import registry
from trt_routes.cache.store import TrialRecord
from trt_routes.errors import UsageError
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.inputs import make_inputs
from trt_routes.evidence.layers import LayerDiff, LayerProfile, compare, sums_check
from trt_routes.files.artifacts import atomic_write_text
from trt_routes.jobs import Job, find_job
from trt_routes.manifest.schema import ReferenceFiles
from trt_routes.project import Project
from trt_routes.routes import describe, route_dict
from trt_routes.selection.rank import DEFAULT_ROUTE
from trt_routes.tune.profiles import closest_challenger


def profile_path(project: Project, trial: TrialRecord) -> Path:
    return project.profiles_dir / f"{trial.id}.json"


def stored_profile(project: Project, trial: TrialRecord) -> LayerProfile | None:
    """The trial's profile if one was taken (a damaged file counts as none)."""
    path = profile_path(project, trial)
    try:
        return LayerProfile.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def trial_profile(project: Project, job: Job, trial: TrialRecord, *, fresh: bool = False) -> LayerProfile:
    """The trial's stored profile, or one taken now from its engine and stored."""
    path = profile_path(project, trial)
    if not fresh and (stored := stored_profile(project, trial)) is not None:
        return stored
    backend = registry.require(job.backend)
    spec = job.build_spec(route_dict(trial.route))
    feeds = reference_inputs(project, job)
    if trial.engine_sha256 and project.store.has(trial.engine_sha256):
        profile = backend.profile(project.store.path(trial.engine_sha256), spec, feeds)
    else:
        profile = _rebuilt_profile(project, backend, spec, feeds, trial)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, profile.dumps())
    return profile


def reference_inputs(project: Project, job: Job) -> dict[str, Any]:
    """The inputs apply's profiles ran on: the job's reference inputs in the blob store, else (a cache pulled
    without them) the same inputs generated again from the job's seed, as its reference run generates them."""
    with project.read_cache() as cache:
        ref = cache.reference(job.reference_key)
    if ref is not None and project.store.has(ref[0]):
        return project.store.get_arrays(ref[0])
    if isinstance(job.reference, ReferenceFiles):
        return project.store.get_arrays(project.store.put_file(project.loaded.resolve(job.reference.inputs)))
    return make_inputs(job.inputs, job.measurement.seed)


def _rebuilt_profile(project: Project, backend: Any, spec: Any, feeds: Any, trial: TrialRecord) -> LayerProfile:
    """A profile of the trial's route built again now (its engine left the blob store, e.g. a cache pulled or
    carried without engines). An engine with the trial's bytes goes back into the store; another one (a
    compiler that picks kernels by timing) is profiled and the profile says it is a rebuild."""
    scratch = project.store.make_scratch()
    engine = scratch / "profile-rebuild.engine"
    try:
        backend.build(spec, engine)
        sha = project.store.put_file(engine)
        profile = backend.profile(project.store.path(sha), spec, feeds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if sha == trial.engine_sha256:
        return profile
    note = (f"engine rebuilt for this profile (the trial's engine {trial.engine_sha256[:12] or 'was not kept'} "
            f"is not in the blob store; the rebuild's bytes differ: {sha[:12]})")
    return replace(profile, note="; ".join(n for n in (profile.note, note) if n))


@dataclass
class LayersReport:
    job: str
    default_route: str
    winner_route: str
    why: str  # which routes these are (the lock's winner, or the closest challenger to a kept default)
    diff: LayerDiff
    default_ms: float | None
    winner_ms: float | None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = self.diff
        return {"job": self.job, "default_route": self.default_route, "winner_route": self.winner_route,
                "why": self.why, "same_layers": d.same_layers, "gain_ms": d.gain_ms,
                "default": {"median_ms": self.default_ms, "layers_ms": d.default.total_ms,
                            "wall_ms": d.default.wall_ms, "runs": d.default.runs, "note": d.default.note},
                "winner": {"median_ms": self.winner_ms, "layers_ms": d.winner.total_ms,
                           "wall_ms": d.winner.wall_ms, "runs": d.winner.runs, "note": d.winner.note},
                "rows": [{"name": r.name, "winner_name": r.winner_name or None, "op": r.op,
                          "default_ms": r.default_ms, "winner_ms": r.winner_ms, "diff_ms": r.diff_ms,
                          "share": d.share(r), "paired_by": r.paired_by or None,
                          "default_where": r.default_where if r.default_ms is not None else None,
                          "winner_where": r.winner_where if r.winner_ms is not None else None}
                         for r in d.largest(len(d.rows))],
                "notes": self.notes}


def compared_route(ex: Explanation) -> tuple[str, str]:
    """(winner route, why): the locked or selected winner, else the fastest other eligible route."""
    winner = ex.lock.route if ex.lock is not None and ex.lock.route is not None else (
        ex.selection.winner if ex.selection is not None else None)
    if winner not in (None, DEFAULT_ROUTE):
        return str(winner), "the winner"
    closest = closest_challenger(ex.selection) if ex.selection is not None else None
    if closest is None:
        raise UsageError(f"{ex.job.name}: the default route was kept and no other route is eligible: nothing to "
                         "compare layer by layer", "`trt-routes profile JOB` still shows the default's layers")
    return closest, "the default route was kept; this is the closest challenger"


def layers(project: Project, name: str) -> LayersReport:
    """The default route against the winner, layer by layer; profiles taken where the cache has none yet."""
    ex = explain(project, name)
    job = ex.job
    by_route = {t.route: t for t in ex.trials}
    if DEFAULT_ROUTE not in by_route:
        raise UsageError(f"{name}: the default route has no trial under the job's current keys",
                         "run `trt-routes apply` first")
    route, why = compared_route(ex)
    if route not in by_route or by_route[route].status != TrialStatus.OK:
        raise UsageError(f"{name}: route {describe(route)} has no measured trial here", "run `trt-routes apply`")
    default_t, winner_t = by_route[DEFAULT_ROUTE], by_route[route]
    diff = compare(trial_profile(project, job, default_t), trial_profile(project, job, winner_t))
    notes = [f"{label}: {why_not}" for label, prof, t in (("default", diff.default, default_t),
                                                       ("winner", diff.winner, winner_t))
             if (why_not := sums_check(prof, t.median_ms)) is not None]
    notes += [f"{label}: {prof.note}" for label, prof in (("default", diff.default), ("winner", diff.winner))
              if prof.note]
    if default_t.median_ms and winner_t.median_ms:
        gain = default_t.median_ms - winner_t.median_ms
        if abs(gain) > 0.02 * default_t.median_ms and abs(diff.gain_ms - gain) > 0.2 * abs(gain):
            notes.append(f"the per-layer differences add up to {diff.gain_ms:.3f} ms of the {gain:.3f} ms between "
                         "the trials' medians: the rest is outside the layers the profiler sees")
    return LayersReport(job.name, DEFAULT_ROUTE, route, why, diff, default_t.median_ms, winner_t.median_ms, notes)


def profile_job(project: Project, name: str, route: str | None, fresh: bool = False) -> tuple[Job, LayerProfile]:
    """The profile of one route of a job (default: the locked route, else the default route)."""
    job = find_job(project.jobs, name)
    with project.read_cache() as cache:
        trials = cache.group(job.group_key) if not job.blocked else {}
    if route is None:
        entry = project.read_lock().jobs.get(job.name)
        route = entry.route if entry is not None and entry.route is not None else DEFAULT_ROUTE
    from trt_routes.routes import parse_route

    route = " ".join(f"{k}={v}" for k, v in sorted(parse_route(route).items())) if route else DEFAULT_ROUTE
    trial = trials.get(route)
    if trial is None or trial.status != TrialStatus.OK:
        known = ", ".join(describe(r) for r, t in sorted(trials.items()) if t.status == TrialStatus.OK) or "none"
        raise UsageError(f"{name}: no measured trial of route {describe(route)} under the job's current keys",
                         f"routes measured: {known}")
    return job, trial_profile(project, job, trial, fresh=fresh)
