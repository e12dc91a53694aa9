"""Does tuning.lock still describe the manifest? Job by job and key by key, without building anything.

Used by ``apply --frozen`` and ``lock check``. Hardware-independent: it compares the manifest's side of
each lock entry (model digest, shapes, settings, protocol, reference, tolerance, strategy, selection rule,
candidates);
the machine's side (the signature) is compared separately by :func:`signature_drift`."""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trt_routes import PROTOCOL_VERSION, canonical
from trt_routes.backends import registry
from trt_routes.catalog import Catalog
from trt_routes.errors import LockfileError, RouteError
from trt_routes.jobs import Job
from trt_routes.lockfile import LockEntry, Lockfile, LockSelection
from trt_routes.plan.diff import candidates_key, tolerance_change
from trt_routes.routes import Expression, describe, parse_route, route_dict
from trt_routes.routes import canonical as canonical_route
from trt_routes.search import cached_search
from trt_routes.search.job import selection_key
from trt_routes.selection.rank import DEFAULT_ROUTE


@dataclass(frozen=True)
class Mismatch:
    """One job on which the manifest and the lockfile disagree."""

    job: str
    kind: str  # added | removed | changed
    details: tuple[str, ...]

    def text(self) -> str:
        return f"{self.job}: {self.kind}: " + "; ".join(self.details)


class LockMismatch(LockfileError):
    """tuning.lock is out of date with the manifest (exit code 2)."""

    def __init__(self, mismatches: list[Mismatch], lock_name: str, manifest_name: str) -> None:
        lines = "\n".join(f"  {m.text()}" for m in mismatches)
        super().__init__(
            f"{lock_name} does not match {manifest_name} ({len(mismatches)} job(s)):\n{lines}",
            "run `trt-routes apply` (without --frozen) on a machine that has the targets, then commit "
            f"{lock_name}",
        )
        self.mismatches = mismatches


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_flat(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: canonical.normalize(value)}


def field_diff(old: Any, new: Any) -> list[str]:
    """'name old -> new' for every leaf that differs (nested mappings flattened with dots)."""
    a, b = _flat(old or {}), _flat(new or {})
    return [f"{k} {a.get(k, '(none)')} -> {b.get(k, '(none)')}" for k in sorted(set(a) | set(b))
            if a.get(k, "(none)") != b.get(k, "(none)")]


def in_search_space(route: str, expression: Expression, catalog: Catalog) -> bool:
    """True when ``route`` assigns each varied knob one of its listed values or its default (one-knob and
    combined routes hold the knobs they do not vary at their defaults), and the pinned knobs as pinned."""
    if route == DEFAULT_ROUTE:
        return True  # the default route is measured for every job
    try:
        wanted = route_dict(route)
        assign = dict(expression.pinned)
        for token in expression.varied:
            knob = catalog.get(token.option)
            default = knob.default if knob is not None else None
            value = wanted.get(token.option, default)
            if value is None or (value not in token.values and value != default):
                return False
            assign[token.option] = value
        return canonical_route(assign, catalog) == route
    except RouteError:
        return False


def _reference_change(job: Job, locked: str, signature_fields: Mapping[str, str]) -> str | None:
    if locked == job.reference_key:
        return None
    if job.reference_shas is not None:
        return "reference files changed"
    if not job.reference_version:
        return None  # backend unavailable here: the automatic reference's key cannot be computed
    # The automatic reference embeds the backend version: a new version alone is signature drift.
    old_v = signature_fields.get("backend_version")
    new_v = registry.get(job.backend).software().get("backend_version")
    if old_v and new_v and old_v != new_v and new_v in job.reference_version:
        then = dataclasses.replace(job, reference_version=job.reference_version.replace(new_v, old_v))
        if then.reference_key == locked:
            return None
    return "reference data changed (the model's inputs: dtype, range or seed)"


def _same_protocol(job: Job, locked: str, signature_fields: Mapping[str, str]) -> bool:
    """The manifest's measurement settings are the locked ones. Under another trt-routes measurement
    protocol (the signature's ``protocol`` field) the keys cannot be compared: that is signature drift,
    reported as such, not a manifest change."""
    if locked == job.protocol_key:
        return True
    old = signature_fields.get("protocol")
    now = job.signature.fields.get("protocol") if job.signature else PROTOCOL_VERSION
    return bool(old) and old != now


def entry_changes(job: Job, entry: LockEntry) -> list[str]:
    """What differs between ``job`` (from the manifest) and its lock entry, field by field."""
    changes: list[str] = []
    keys = entry.keys or {}
    fields = entry.signature_fields or {}
    if entry.backend and entry.backend != job.backend:
        changes.append(f"backend changed: {entry.backend} -> {job.backend}")
    if entry.get("status", "ok") != "ok" or entry.route is None:
        changes.append("the lock entry has no chosen route")
    if keys.get("model_digest") and keys["model_digest"] != job.model_digest:
        model_path = entry.model.path if entry.model and "path" in entry.model else job.model_path.name
        changes.append(f"model digest changed ({model_path}: "
                       f"{keys['model_digest'][:12]} -> {job.model_digest[:12] or 'missing'})")
    if keys.get("shape_key") and keys["shape_key"] != job.shape_key:
        changes.append("shape profile changed: " + (", ".join(field_diff(entry.profile, job.profile))
                                                    or "(details not in the lock)"))
    if keys.get("settings_key") and keys["settings_key"] != job.settings_key:
        changes.append("build settings changed: " + (", ".join(field_diff(entry.settings, job.settings))
                                                     or "(details not in the lock)"))
    protocol_changed = bool(keys.get("protocol_key")) and not _same_protocol(job, keys["protocol_key"], fields)
    if protocol_changed:
        changes.append("measurement protocol changed (warmup, iterations, repeats or seed)")
    first_order = protocol_changed or any(keys.get(k) and keys[k] != getattr(job, k)
                                          for k in ("model_digest", "shape_key"))
    if keys.get("reference_key") and not first_order and \
            (why := _reference_change(job, keys["reference_key"], fields)) is not None:
        changes.append(why)
    if entry.tolerance_key and entry.tolerance_key != job.tolerance_key:
        changes.append(tolerance_change(job.tolerance_name, entry.tolerance, job.tolerance))
    selection = entry.selection
    if selection is not None and selection.key and selection.key != selection_key(job):
        changes.append(_selection_change(job, selection))
    strategy = {"name": job.strategy_name, "mode": job.strategy.mode}
    old = entry.strategy
    if old is not None and old.to_data() and old.to_data() != strategy:
        changes.append(f"strategy changed: '{old.name}' ({old.mode}) -> "
                       f"'{job.strategy_name}' ({job.strategy.mode})")
    elif job.expression is not None and job.catalog is not None:
        changes += _candidate_changes(job, entry)
    return changes


def _selection_change(job: Job, selection: LockSelection) -> str:
    """How the selection rule (the strategy's ``confirm`` settings) differs from the one the lock was
    decided under, field by field where the lock's confirmation record names the old values."""
    head = f"selection rule changed (strategy '{job.strategy_name}' confirm)"
    confirm = job.strategy.confirm
    if confirm is None:
        return f"{head}: side-by-side confirmation turned off (confirm: false)"
    if selection.key == canonical.digest(None, 16):
        return f"{head}: side-by-side confirmation turned on"
    old = selection.confirmation or {}
    new = confirm.model_dump()
    diff = [f"{k} {canonical.normalize(old[k])} -> {canonical.normalize(new[k])}" for k in sorted(new)
            if k in old and canonical.normalize(old[k]) != canonical.normalize(new[k])]
    return f"{head}: " + (", ".join(diff) or "(details not in the lock)")


def route_defect(job: Job, route: object) -> str | None:
    """Why ``route`` (a lock entry's) cannot be a route of ``job``: a knob or value its backend's catalog
    does not have (None when it parses, or when the backend is not here to ask)."""
    if job.catalog is None or not isinstance(route, str) or route == DEFAULT_ROUTE:
        return None
    try:
        parse_route(route, job.catalog, source="locked route")
    except RouteError as exc:
        return f"the locked route {describe(route)} is not a {job.backend} route: {exc.message}"
    return None


def engine_path_defect(entry: LockEntry, root: Path, engines: Path) -> str | None:
    """Why the entry's ``engine.path`` (relative to the manifest's folder ``root``) is not a place trt-routes
    materializes engines: outside the project's engine folder ``engines`` (paths.out), e.g. /etc/passwd."""
    rel = entry.engine.path if entry.engine else None
    if not rel:
        return None
    if not isinstance(rel, str) or not (root / rel).resolve().is_relative_to(engines.resolve()):
        return (f"the locked engine path {str(rel)[:120]} is outside the project's engine folder "
                f"({engines.name}/, paths.out): trt-routes never writes engines there")
    return None


def _candidate_changes(job: Job, entry: LockEntry) -> list[str]:
    assert job.expression is not None and job.catalog is not None
    if defect := route_defect(job, entry.route):
        return [defect]
    search = cached_search(job.strategy.mode, job.expression, job.catalog)
    if search.static and job.strategy.max_builds is None:
        static = tuple(search.verdict_routes({}))
        if entry.candidates_key and entry.candidates_key != candidates_key(static):
            return [f"candidate routes changed (switch group '{job.switch_group}' or strategy "
                    f"'{job.strategy_name}')"]
        return []
    route = entry.route
    if isinstance(route, str) and not in_search_space(route, job.expression, job.catalog):
        return [f"the locked route {describe(route)} is outside switch group '{job.switch_group}'"]
    return []


def lock_mismatches(jobs: list[Job], lock: Lockfile, patterns: list[str] | None = None) -> list[Mismatch]:
    """Every job added to, removed from or changed in the manifest since the lock was written.

    With ``patterns`` (``--only``) only lock entries matching them count as removed."""
    out: list[Mismatch] = []
    for job in jobs:
        entry = lock.jobs.get(job.name)
        if entry is None:
            out.append(Mismatch(job.name, "added", ("in the manifest but not in the lockfile",)))
        elif changes := entry_changes(job, entry):
            out.append(Mismatch(job.name, "changed", tuple(changes)))
    names = {j.name for j in jobs}
    for name in sorted(set(lock.jobs) - names):
        if patterns and not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        out.append(Mismatch(name, "removed", ("in the lockfile but no longer in the manifest",)))
    return sorted(out, key=lambda m: m.job)


def signature_drift(job: Job, entry: LockEntry) -> list[str]:
    """'field old -> new' for every signature field in which this machine differs from the lock.

    Every field counts: a signature holds only what measured facts depend on (hardware, driver,
    backend and tuner versions, catalog, protocol); volatile values never enter it."""
    if job.signature is None:
        return []
    fields = entry.signature_fields
    if not fields:
        return ["the lock entry records no signature"]
    return job.signature.diff({str(k): str(v) for k, v in fields.items()})


def unchecked(jobs: list[Job]) -> list[str]:
    """Jobs whose lock entry could be compared only in part here (their backend is not installed)."""
    return [f"{j.name}: the {j.backend} backend is unavailable here, so its switch group and automatic "
            "reference were not compared" for j in jobs if j.catalog is None]
