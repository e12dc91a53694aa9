"""What a row from another machine must be before it enters the cache: every bundle and remote row (trials,
signatures, references, re-measurements, search states) parsed and checked as data, never trusted. A trial's
timings are finite, positive and consistent with its samples, its route canonical, its status consistent with
its fields, its identity fields free of terminal control; free text is sanitized (``share.bundle`` reads the
rows, this module judges each one)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any

from trt_routes import canonical
from trt_routes.cache.store import STATUSES, TrialRecord
from trt_routes.errors import CacheError, RouteError
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.meta import TrialMeta
from trt_routes.routes import parse_route
from trt_routes.text import is_clean, loads_bounded, sanitize, sanitize_data

REMEASUREMENT_FIELDS = ("key", "group_key", "job", "baseline", "challengers", "data", "created_at", "host",
                        "tool_version")
SEARCH_FIELDS = ("group_key", "strategy_key", "job", "warm", "state", "builds", "seconds", "updated_at")
SEARCH_STATES = ("running", "budget", "complete")
#: Bounds on numbers a row can carry (a fact beyond them is not a measurement).
MAX_MS = 3.6e6  # one hour per inference
MAX_SECONDS = 1e7  # about 115 days
MAX_SAMPLES = 1_000_000
MAX_SEARCH_BUILDS = 1_000_000
MAX_TEXT = 1 << 20
MAX_ROUTE = 8192
_HEX = {16: re.compile(r"^[0-9a-f]{16}$"), 32: re.compile(r"^[0-9a-f]{32}$"), 64: re.compile(r"^[0-9a-f]{64}$")}
_BLOB_NAME = re.compile(r"^blobs/([0-9a-f]{64})$")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class BundleError(CacheError):
    """A bundle (or remote segment) is malformed, tampered with, or from a newer trt-routes."""


def expected_group_key(trial: TrialRecord) -> str:
    """The group key a trial's own key parts hash to (mirrors ``Job.group_key``; a test keeps them equal)."""
    return canonical.digest([trial.signature, trial.backend, trial.model_digest, trial.shape_key,
                             trial.settings_key, trial.protocol_key, trial.reference_key], 32)


def expected_trial_id(trial: TrialRecord) -> str:
    """The id a trial's group key and route hash to (mirrors ``Job.trial_id``)."""
    return canonical.digest([trial.group_key, trial.route], 32)


# -- row schema -----------------------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite_or_none(v: Any) -> bool:
    return v is None or (_is_number(v) and math.isfinite(v))


def _losses(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(m, dict)
        and all(isinstance(mk, str) and (_is_number(mv) or mv is None) for mk, mv in m.items())
        for k, m in v.items())


#: One checker per annotation used in TrialRecord; a field with any other annotation fails loudly at import.
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "TrialStatus": (lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}"),
    "float | None": (_finite_or_none, "a finite number or null"),
    "list[float]": (lambda v: isinstance(v, list) and all(_is_number(x) and math.isfinite(x) for x in v),
                    "a list of finite numbers"),
    "dict[str, dict[str, float]]": (_losses, "an object {output: {metric: number}}"),
    "TrialMeta": (lambda v: isinstance(v, dict), "an object"),
}
TRIAL_FIELDS = {f.name: f for f in fields(TrialRecord)}
_UNCHECKED = sorted({str(f.type) for f in TRIAL_FIELDS.values()} - set(_CHECKS))
if _UNCHECKED:  # pragma: no cover - guards future TrialRecord changes
    raise RuntimeError(f"share/rows.py has no schema check for TrialRecord annotations {_UNCHECKED}")
_REQUIRED = {n for n, f in TRIAL_FIELDS.items() if f.default is MISSING and f.default_factory is MISSING}


def route_problem(route: Any) -> str | None:
    """Why ``route`` is not a canonical route (``-k=v`` pinned tokens sorted by knob, one space), or None."""
    if not isinstance(route, str):
        return "a route must be a string"
    if len(route) > MAX_ROUTE or not is_clean(route, newlines=False) or "\n" in route:
        return "a route must be one line of printable text"
    if not route:
        return None
    try:
        assign = parse_route(route)
    except RouteError as exc:
        return f"route {route!r:.80} does not parse ({exc.message})"
    if route != " ".join(f"{k}={assign[k]}" for k in sorted(assign)):
        return f"route {route!r:.80} is not canonical (knobs sorted by name, -knob=value, one space apart)"
    return None


#: Identity fields: refused unless clean (they are keys and names, printed everywhere). Free text is sanitized.
_IDENTITY = ("job", "backend", "model_digest", "shape_key", "settings_key", "protocol_key", "reference_key",
             "host", "source", "tool_version", "created_at")
_FREE_TEXT = ("error", "log")
_TIMINGS = ("median_ms", "ci_low", "ci_high", "mean_ms")


def _facts_problem(t: TrialRecord) -> str | None:
    """Why a trial's numbers and status do not make a measurement, or None."""
    for name in _TIMINGS:
        v = getattr(t, name)
        if v is not None and not 0 < v <= MAX_MS:
            return f"'{name}' {v!r} is not a time (more than 0 and at most {MAX_MS:g} ms)"
    if t.stdev_ms is not None and not 0 <= t.stdev_ms <= MAX_MS:
        return f"'stdev_ms' {t.stdev_ms!r} is not a spread (0 to {MAX_MS:g} ms)"
    if len(t.samples) > MAX_SAMPLES:
        return f"{len(t.samples)} samples (at most {MAX_SAMPLES})"
    bad_sample = next((x for x in t.samples if not 0 < x <= MAX_MS), None)
    if bad_sample is not None:
        return f"sample {bad_sample!r} is not a time (more than 0 and at most {MAX_MS:g} ms)"
    for name in ("build_s", "measure_s"):
        v = getattr(t, name)
        if v is not None and not 0 <= v <= MAX_SECONDS:
            return f"'{name}' {v!r} is not a duration (0 to {MAX_SECONDS:g} s)"
    for out, metrics in t.losses.items():
        for metric, v in metrics.items():
            if v is not None and not (math.isnan(v) or v >= 0):
                return f"loss {out}/{metric} {v!r} is negative"
    if t.samples:
        lo, hi = min(t.samples), max(t.samples)
        slack = 1e-9 * hi
        for name in ("median_ms", "mean_ms"):
            v = getattr(t, name)
            if v is not None and not lo - slack <= v <= hi + slack:
                return f"'{name}' {v!r} lies outside its samples ({lo!r} to {hi!r})"
    elif t.median_ms is not None or t.mean_ms is not None:
        return "it has a median or mean but no samples"
    if t.median_ms is not None:
        lo_ci = t.ci_low if t.ci_low is not None else t.median_ms
        hi_ci = t.ci_high if t.ci_high is not None else t.median_ms
        slack = 1e-9 * t.median_ms
        if not lo_ci - slack <= t.median_ms <= hi_ci + slack:
            return f"its confidence interval [{t.ci_low!r}, {t.ci_high!r}] does not hold its median {t.median_ms!r}"
    elif t.ci_low is not None or t.ci_high is not None:
        return "it has a confidence interval but no median"
    if t.status == TrialStatus.OK:
        if t.median_ms is None or not t.samples:
            return "status 'ok' needs a median and samples"
        if not t.engine_sha256:
            return "status 'ok' needs the engine's sha256"
    elif t.status in (TrialStatus.CRASHED, TrialStatus.TIMEOUT, TrialStatus.BUILD_ERROR) and not t.error.strip():
        return f"status '{t.status}' needs the error that ended it"
    elif t.status == TrialStatus.ACCURACY_FAILED and not (t.error.strip() or t.losses):
        return "status 'accuracy-failed' needs its losses or an error"
    if t.status == TrialStatus.BUILD_ERROR and t.engine_sha256:
        return "status 'build-error' cannot name an engine"
    return None


def parse_trial(obj: Any, where: str) -> TrialRecord:
    """A TrialRecord from one decoded row, or BundleError naming ``where`` and the bad field."""
    def bad(msg: str) -> BundleError:
        return BundleError(f"{where}: {msg}", "the bundle is corrupt or was altered; ask for a fresh export")

    if not isinstance(obj, dict):
        raise bad(f"a trial row must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(TRIAL_FIELDS))
    if unknown:
        raise bad(f"unknown trial field(s) {', '.join(unknown)}")
    missing = sorted(_REQUIRED - set(obj))
    if missing:
        raise bad(f"trial row lacks {', '.join(missing)}")
    for name, value in obj.items():
        check, what = _CHECKS[str(TRIAL_FIELDS[name].type)]
        if not check(value):
            raise bad(f"trial field '{name}' must be {what}, got {value!r:.80}")
    for name in _IDENTITY:
        if name in obj and (len(obj[name]) > 1024 or not is_clean(obj[name], newlines=False)):
            raise bad(f"trial field '{name}' must be one line of printable text of at most 1024 characters "
                      f"(no control characters or escape sequences), got {obj[name]!r:.80}")
    for name in _FREE_TEXT:
        if name in obj and len(obj[name]) > MAX_TEXT:
            raise bad(f"trial field '{name}' is longer than {MAX_TEXT} characters")
    trial = TrialRecord(**{**obj, "status": TrialStatus(obj["status"]),
                           "meta": TrialMeta.from_json(sanitize_data(obj.get("meta")))})
    trial.error, trial.log = sanitize(trial.error), sanitize(trial.log)
    problem = route_problem(trial.route)
    if problem:
        raise bad(f"trial field 'route': {problem}")
    problem = _facts_problem(trial)
    if problem:
        raise bad(f"trial {trial.id:.32} ({trial.status}): {problem}")
    for name, size in (("id", 32), ("group_key", 32), ("signature", 16)):
        if not _HEX[size].match(getattr(trial, name)):
            raise bad(f"trial field '{name}' must be {size} hex digits, got {getattr(trial, name)!r:.80}")
    for name in ("engine_sha256", "outputs_sha256"):
        if getattr(trial, name) and not _HEX[64].match(getattr(trial, name)):
            raise bad(f"trial field '{name}' must be a sha256 (64 hex digits) or empty")
    if not _TIME.match(trial.created_at):
        raise bad(f"trial created_at {trial.created_at!r} is not a UTC time like 2025-01-31T12:00:00Z")
    if trial.group_key != expected_group_key(trial):
        raise bad(f"trial {trial.id}: its group key does not match its signature and key parts")
    if trial.id != expected_trial_id(trial):
        raise bad(f"trial {trial.id}: its id does not match its group key and route")
    return trial


def parse_signature(obj: Any, where: str) -> tuple[str, dict[str, str]]:
    if not (isinstance(obj, dict) and set(obj) == {"hash", "fields"} and isinstance(obj["fields"], dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in obj["fields"].items())
            and isinstance(obj["hash"], str)):
        raise BundleError(f"{where}: a signature row is {{hash, fields: {{name: text}}}}")
    if len(obj["fields"]) > 256 or not all(len(k) <= 256 and len(v) <= 4096 and is_clean(k, newlines=False)
                                             and is_clean(v, newlines=False) for k, v in obj["fields"].items()):
        raise BundleError(f"{where}: signature fields must be at most 256 one-line printable names and values "
                          "(no control characters or escape sequences)")
    if canonical.digest(obj["fields"], 16) != obj["hash"]:
        raise BundleError(f"{where}: signature {obj['hash']!r:.40} does not hash to its fields")
    return obj["hash"], dict(obj["fields"])


def parse_reference(obj: Any, where: str) -> dict[str, str]:
    keys = {"key", "inputs_sha256", "outputs_sha256", "created_at"}
    if not (isinstance(obj, dict) and set(obj) == keys and all(isinstance(obj[k], str) for k in keys)
            and _HEX[16].match(obj["key"]) and _HEX[64].match(obj["inputs_sha256"])
            and _HEX[64].match(obj["outputs_sha256"]) and _TIME.match(obj["created_at"])):
        raise BundleError(f"{where}: a reference row is {{key, inputs_sha256, outputs_sha256, created_at}} "
                          "(a UTC created_at)")
    return dict(obj)


def parse_remeasurement(obj: Any, where: str) -> dict[str, str]:
    """A re-measurement row (the cache's columns; ``challengers`` and ``data`` are JSON text)."""
    if not (isinstance(obj, dict) and set(obj) == set(REMEASUREMENT_FIELDS)
            and all(isinstance(obj[k], str) for k in REMEASUREMENT_FIELDS)
            and obj["key"] and len(obj["key"]) <= 128 and _HEX[32].match(obj["group_key"])
            and _TIME.match(obj["created_at"])):
        raise BundleError(f"{where}: a re-measurement row is {{{', '.join(REMEASUREMENT_FIELDS)}}} (text), "
                          "with a 32-hex group_key and a UTC created_at")
    try:
        challengers, data = loads_bounded(obj["challengers"]), loads_bounded(obj["data"])
    except ValueError as exc:
        raise BundleError(f"{where}: re-measurement challengers/data are not JSON ({exc})") from exc
    if not (isinstance(challengers, list) and all(isinstance(c, str) for c in challengers)
            and isinstance(data, dict)):
        raise BundleError(f"{where}: re-measurement challengers must be a list of routes and data an object")
    for name in ("job", "host", "tool_version"):
        if not is_clean(obj[name], newlines=False) or len(obj[name]) > 1024:
            raise BundleError(f"{where}: re-measurement {name} must be one line of printable text")
    problem = next((p for p in map(route_problem, [obj["baseline"], *challengers]) if p), None)
    if problem:
        raise BundleError(f"{where}: re-measurement: {problem}")
    slots = data.get("slots")
    if not (data.get("baseline") == obj["baseline"] and data.get("challengers") == challengers
            and isinstance(slots, list) and len(slots) <= MAX_SAMPLES
            and all(isinstance(s, list) and len(s) == 2 and s[0] in (obj["baseline"], *challengers)
                    and _is_number(s[1]) and math.isfinite(s[1]) and 0 < s[1] <= MAX_MS for s in slots)):
        raise BundleError(f"{where}: re-measurement data must repeat its baseline and challengers and hold "
                          f"slots [route, ms] of its own routes with times more than 0 and at most {MAX_MS:g} ms")
    return {**obj, "data": json.dumps(sanitize_data(data), allow_nan=False)} if not is_clean(obj["data"]) else dict(obj)


def parse_search(obj: Any, where: str) -> dict[str, Any]:
    """A search-state row (the cache's columns; ``warm`` is JSON text: the warm-start routes)."""
    if not (isinstance(obj, dict) and set(obj) == set(SEARCH_FIELDS)
            and all(isinstance(obj[k], str) for k in ("group_key", "strategy_key", "job", "warm", "state",
                                                       "updated_at"))
            and _HEX[32].match(obj["group_key"]) and _HEX[16].match(obj["strategy_key"])
            and obj["state"] in SEARCH_STATES and _TIME.match(obj["updated_at"])
            and isinstance(obj["builds"], int) and not isinstance(obj["builds"], bool)
            and 0 <= obj["builds"] <= MAX_SEARCH_BUILDS
            and isinstance(obj["seconds"], (int, float)) and not isinstance(obj["seconds"], bool)
            and math.isfinite(obj["seconds"]) and 0 <= obj["seconds"] <= MAX_SECONDS
            and is_clean(obj["job"], newlines=False) and len(obj["job"]) <= 1024):
        raise BundleError(f"{where}: a search row is {{{', '.join(SEARCH_FIELDS)}}} with a 32-hex group_key, "
                          f"a 16-hex strategy_key, state one of {', '.join(SEARCH_STATES)}, builds (0 to "
                          f"{MAX_SEARCH_BUILDS}) and seconds (0 to {MAX_SECONDS:g}), a printable job and a UTC "
                          "updated_at")
    try:
        warm = loads_bounded(obj["warm"])
    except ValueError as exc:
        raise BundleError(f"{where}: search warm routes are not JSON ({exc})") from exc
    # a list of warm-start routes, or (with priors of failed values) {"routes": [...], "avoid": ["-k=v", ...]}
    routes, avoid = (warm.get("routes"), warm.get("avoid")) if isinstance(warm, dict) and \
        set(warm) == {"routes", "avoid"} else (warm, [])
    if not (isinstance(routes, list) and all(isinstance(r, str) for r in routes)
            and isinstance(avoid, list) and all(isinstance(u, str) and " " not in u for u in avoid)):
        raise BundleError(f"{where}: search warm routes must be a list of routes, or "
                          "{\"routes\": [...], \"avoid\": [option=value, ...]}")
    problem = next((p for p in map(route_problem, [*routes, *avoid]) if p), None)
    if problem:
        raise BundleError(f"{where}: search warm routes: {problem}")
    return {**obj, "seconds": float(obj["seconds"])}


def trial_json(trial: TrialRecord) -> dict[str, Any]:
    """A trial as bundle JSON (structures, not the cache's JSON-in-text columns)."""
    return {**{f: getattr(trial, f) for f in TRIAL_FIELDS}, "meta": trial.meta.to_json()}
