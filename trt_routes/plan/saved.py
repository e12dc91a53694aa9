"""Saved plans: ``plan --out FILE`` writes a plan with digests of everything it was computed from
(manifest, lockfile, trial cache index, each job's keys and signature); ``apply --plan FILE`` refuses it
when any of them changed since (stale-plan protection, as Terraform does), else executes exactly it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trt_routes import __version__
from trt_routes.cache.store import CacheStore, now
from trt_routes.canonical import file_sha256
from trt_routes.errors import UsageError
from trt_routes.files.artifacts import atomic_write_text
from trt_routes.jobs import Job
from trt_routes.lockfile import Lockfile
from trt_routes.plan.diff import Plan, stale_reasons
from trt_routes.project import Project
from trt_routes.text import NotRegularFileError, loads_bounded, read_regular

PLAN_FORMAT = "trt-routes-plan"
PLAN_VERSION = 1


class StalePlan(UsageError):
    """A saved plan no longer describes the world it would change (exit code 2)."""

    def __init__(self, path: Path, changes: list[str]) -> None:
        lines = "\n".join(f"  {c}" for c in changes)
        super().__init__(f"saved plan {path} is stale; since it was made:\n{lines}",
                         f"make a new plan with `trt-routes plan --out {path}`, review it, then apply it")
        self.changes = changes


def cache_state(cache: CacheStore) -> tuple[str, int]:
    """(digest, trial count) of the cache index: every trial's id, status, time and engine, and every
    reference. Any trial added, replaced or deleted changes the digest."""
    h = hashlib.sha256()
    count = 0
    for row in cache.conn.execute("SELECT id, status, created_at, engine_sha256 FROM trials ORDER BY id"):
        h.update(("\x1f".join(str(v) for v in row) + "\n").encode())
        count += 1
    h.update(b"--references--\n")
    for row in cache.conn.execute("SELECT key, inputs_sha256, outputs_sha256 FROM [references] ORDER BY key"):
        h.update(("\x1f".join(str(v) for v in row) + "\n").encode())
    return h.hexdigest(), count


def _job_state(job: Job) -> dict[str, Any]:
    return {"group_key": job.group_key, "keys": job.key_parts(), "tolerance_key": job.tolerance_key,
            "signature": job.signature.fields if job.signature else None, "blocked": job.blocked}


@dataclass
class PlanState:
    """What a plan was computed from."""

    manifest_sha256: str
    lockfile_sha256: str  # "" when there is no lockfile
    cache_digest: str
    cache_trials: int
    jobs: dict[str, dict[str, Any]]
    only: list[str] = field(default_factory=list)
    tool_version: str = __version__

    @classmethod
    def of(cls, project: Project, cache: CacheStore, only: list[str] | None = None) -> PlanState:
        digest, count = cache_state(cache)
        lock = project.lock_path
        return cls(manifest_sha256=file_sha256(project.loaded.path),
                   lockfile_sha256=file_sha256(lock) if lock.is_file() else "", cache_digest=digest,
                   cache_trials=count, jobs={j.name: _job_state(j) for j in project.select_jobs(only)},
                   only=list(only or []))


@dataclass
class SavedPlan:
    path: Path
    state: PlanState
    plan: dict[str, Any]
    manifest_path: str = ""
    created_at: str = ""


def save_plan(path: Path, project: Project, plan: Plan, state: PlanState) -> None:
    data = {
        "format": PLAN_FORMAT, "version": PLAN_VERSION, "tool_version": state.tool_version, "created_at": now(),
        "manifest": {"path": str(project.loaded.path), "sha256": state.manifest_sha256},
        "lockfile": {"path": project.rel(project.lock_path), "sha256": state.lockfile_sha256},
        "cache": {"digest": state.cache_digest, "trials": state.cache_trials},
        "only": state.only, "jobs": state.jobs, "plan": plan.to_json(),
    }
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


#: The largest saved plan read (a 200-job plan is well under 1 MB).
MAX_PLAN_BYTES = 64 * 1024 * 1024


def load_plan(path: Path) -> SavedPlan:
    """Read a plan written by ``plan --out``; anything else is refused with a clear message."""
    hint = "make one with `trt-routes plan --out FILE`"
    try:
        data = loads_bounded(read_regular(path, MAX_PLAN_BYTES).decode("utf-8"))
    except NotRegularFileError as exc:
        raise UsageError(f"{path} {exc}", hint) from None
    except FileNotFoundError as exc:
        raise UsageError(f"no saved plan at {path}", hint) from exc
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} is not a saved trt-routes plan: {exc}", hint) from exc
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise UsageError(f"{path} is not a saved trt-routes plan (no format: {PLAN_FORMAT})",
                         hint + "; the manifest itself goes to --manifest/-m")
    if not isinstance(data.get("version"), int) or data["version"] > PLAN_VERSION:
        raise UsageError(f"{path}: plan format version {data.get('version')} is newer than this trt-routes "
                         f"understands ({PLAN_VERSION})", "upgrade trt-routes, or make a new plan")
    try:
        state = PlanState(manifest_sha256=data["manifest"]["sha256"], lockfile_sha256=data["lockfile"]["sha256"],
                          cache_digest=data["cache"]["digest"], cache_trials=int(data["cache"]["trials"]),
                          jobs=dict(data["jobs"]), only=list(data.get("only") or []),
                          tool_version=str(data.get("tool_version", "")))
        plan = dict(data["plan"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: saved plan is incomplete ({exc})", hint) from exc
    return SavedPlan(path=Path(path), state=state, plan=plan, manifest_path=str(data["manifest"].get("path", "")),
                     created_at=str(data.get("created_at", "")))


def _job_changes(saved: dict[str, dict[str, Any]], project: Project, only: list[str]) -> list[str]:
    out: list[str] = []
    current = {j.name: j for j in project.select_jobs(only or None)}
    for name in sorted(set(saved) | set(current)):
        if name not in current:
            out.append(f"{name}: job removed from the manifest")
            continue
        if name not in saved:
            out.append(f"{name}: job added to the manifest")
            continue
        job, old = current[name], saved[name]
        if old.get("group_key") == job.group_key and old.get("tolerance_key") == job.tolerance_key and \
                old.get("blocked") == job.blocked:
            continue
        reasons = stale_reasons(job, old.get("keys") or {}, old.get("signature"))
        if old.get("tolerance_key") != job.tolerance_key:
            reasons.append("tolerance changed")
        if old.get("blocked") != job.blocked:
            reasons.append(f"now {'blocked: ' + job.blocked if job.blocked else 'runnable'}")
        out.append(f"{name}: " + ("; ".join(reasons) or "job keys changed"))
    return out


def _plan_changes(saved: dict[str, Any], plan: Plan) -> list[str]:
    out: list[str] = []
    old = {j["job"]: j for j in saved.get("jobs", [])}
    for jp in plan.jobs:
        was = old.get(jp.job.name)
        if was is None:
            continue  # reported with the jobs
        if was.get("action") != jp.action or list(was.get("to_build", [])) != list(jp.to_build):
            out.append(f"{jp.job.name}: planned {was.get('action')} ({len(was.get('to_build', []))} build(s)), "
                       f"now {jp.action} ({len(jp.to_build)} build(s)): {'; '.join(jp.reasons)}")
    if sorted(saved.get("removed", [])) != sorted(plan.removed):
        out.append(f"lock entries to remove: {saved.get('removed', [])} -> {plan.removed}")
    return out


def stale_changes(saved: SavedPlan, now_state: PlanState, plan: Plan, project: Project) -> list[str]:
    """Everything that differs between when ``saved`` was made and now; empty when it is still valid."""
    old = saved.state
    changes: list[str] = []
    if old.tool_version != now_state.tool_version:
        changes.append(f"trt-routes version changed: {old.tool_version} -> {now_state.tool_version}")
    if old.manifest_sha256 != now_state.manifest_sha256:
        changes.append(f"manifest {project.loaded.path.name} changed "
                       f"(sha256 {old.manifest_sha256[:12]} -> {now_state.manifest_sha256[:12]})")
    if old.lockfile_sha256 != now_state.lockfile_sha256:
        name = project.lock_path.name
        changes.append(f"{name} was created" if not old.lockfile_sha256 else f"{name} was deleted"
                       if not now_state.lockfile_sha256 else
                       f"{name} changed (sha256 {old.lockfile_sha256[:12]} -> {now_state.lockfile_sha256[:12]})")
    if old.cache_digest != now_state.cache_digest:
        delta = now_state.cache_trials - old.cache_trials
        changes.append(f"the trial cache changed ({old.cache_trials} -> {now_state.cache_trials} trials"
                       + ("" if delta else ", some replaced or their references changed") + ")")
    changes += _job_changes(old.jobs, project, old.only)
    if not changes:
        changes += _plan_changes(saved.plan, plan)  # e.g. an engine on disk deleted since
    return changes


def plan_verifier(saved: SavedPlan, project: Project) -> Callable[[Plan, CacheStore, Lockfile], None]:
    """The check ``apply`` runs on its freshly computed plan, under the project lock and before any
    write: raises StalePlan unless the world is still the one the saved plan was made against."""

    def check(plan: Plan, cache: CacheStore, lock: Lockfile) -> None:
        changes = stale_changes(saved, PlanState.of(project, cache, saved.state.only), plan, project)
        if changes:
            raise StalePlan(saved.path, changes)

    return check
