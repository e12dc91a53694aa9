"""Portable bundles of trials: a gzip'd tar whose first member is a versioned JSON manifest, then JSON
Lines tables (trials, signatures, references) and content-addressed blobs (``blobs/<sha256>``).

Reading trusts nothing: format and version, every member's name, type, size and sha256, the schema and
keys of every row, and every row as data (finite, positive timings consistent with their samples,
canonical routes, statuses consistent with their fields, search states within bounds, identity fields
free of terminal control; free text is sanitized). Member names are matched against a fixed allow-list
and never become paths; a blob is staged under the store and named only by the digest of the bytes
actually read. Sizes are capped before anything is written: what a bundle may decompress to is bounded
by its size on disk (``MAX_EXPANSION``), declared sizes are checked against that bound first, and rows
are parsed as they stream (each JSON document nests at most ``text.MAX_JSON_DEPTH`` levels)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import re
import shutil
import socket
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import IO, Any, cast

from trt_routes import __version__, canonical
from trt_routes.cache.store import STATUSES, TrialRecord, now
from trt_routes.errors import CacheError, RouteError
from trt_routes.files.artifacts import atomic_output
from trt_routes.routes import parse_route
from trt_routes.text import is_clean, loads_bounded, sanitize, sanitize_data

FORMAT = "trt-routes-bundle"
VERSION = 1
MANIFEST = "trt-routes-bundle.json"
TABLES = ("trials.jsonl", "signatures.jsonl", "references.jsonl")
#: Present when the exporting cache has such rows: side-by-side re-measurements that confirm winners, and
#: the state of each job group's search (warm-start routes, budget spent), so a machine that pulls a
#: complete cache plans the same search and finds nothing left to build.
OPTIONAL_TABLES = ("remeasurements.jsonl", "searches.jsonl")
REMEASUREMENT_FIELDS = ("key", "group_key", "job", "baseline", "challengers", "data", "created_at", "host",
                        "tool_version")
SEARCH_FIELDS = ("group_key", "strategy_key", "job", "warm", "state", "builds", "seconds", "updated_at")
SEARCH_STATES = ("running", "budget", "complete")
BLOB_KINDS = ("engine", "outputs", "reference")
MAX_MANIFEST_BYTES = 16 << 20
#: A table is parsed into rows in memory: 256 MiB of JSON Lines is far more than any cache needs (a large
#: one is a few tens of MiB); `cache export --only PATTERN` splits a larger one.
MAX_TABLE_BYTES = 256 << 20
MAX_ROW_BYTES = 16 << 20
#: What a bundle may decompress to: this many times its size on disk, and at least MIN_EXPANDED_BYTES.
#: gzip'd engines and tables shrink 1.1-10x; a decompression bomb (1000x) is refused before it is written.
MAX_EXPANSION = 50
MIN_EXPANDED_BYTES = 32 << 20
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
    "float | None": (_finite_or_none, "a finite number or null"),
    "list[float]": (lambda v: isinstance(v, list) and all(_is_number(x) and math.isfinite(x) for x in v),
                    "a list of finite numbers"),
    "dict[str, dict[str, float]]": (_losses, "an object {output: {metric: number}}"),
    "dict[str, Any]": (lambda v: isinstance(v, dict), "an object"),
}
TRIAL_FIELDS = {f.name: f for f in fields(TrialRecord)}
_UNCHECKED = sorted({str(f.type) for f in TRIAL_FIELDS.values()} - set(_CHECKS))
if _UNCHECKED:  # pragma: no cover - guards future TrialRecord changes
    raise RuntimeError(f"bundle.py has no schema check for TrialRecord annotations {_UNCHECKED}")
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
    if t.status == "ok":
        if t.median_ms is None or not t.samples:
            return "status 'ok' needs a median and samples"
        if not t.engine_sha256:
            return "status 'ok' needs the engine's sha256"
    elif t.status in ("crashed", "timeout", "build-error") and not t.error.strip():
        return f"status {t.status!r} needs the error that ended it"
    elif t.status == "accuracy-failed" and not (t.error.strip() or t.losses):
        return "status 'accuracy-failed' needs its losses or an error"
    if t.status == "build-error" and t.engine_sha256:
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
    trial = TrialRecord(**obj)
    trial.error, trial.log = sanitize(trial.error), sanitize(trial.log)
    trial.meta = sanitize_data(trial.meta)
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
    if trial.status not in STATUSES:
        raise bad(f"trial status {trial.status!r} is not one of {', '.join(STATUSES)}")
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
    if not (isinstance(warm, list) and all(isinstance(r, str) for r in warm)):
        raise BundleError(f"{where}: search warm routes must be a list of routes")
    problem = next((p for p in map(route_problem, warm) if p), None)
    if problem:
        raise BundleError(f"{where}: search warm routes: {problem}")
    return {**obj, "seconds": float(obj["seconds"])}


def trial_json(trial: TrialRecord) -> dict[str, Any]:
    """A trial as bundle JSON (structures, not the cache's JSON-in-text columns)."""
    return {f: getattr(trial, f) for f in TRIAL_FIELDS}


def _jsonl(rows: Iterable[Any], sort_keys: bool = True) -> bytes:
    return b"".join(json.dumps(r, sort_keys=sort_keys, separators=(",", ":"), allow_nan=True).encode() + b"\n"
                    for r in rows)


# -- the bundle --------------------------------------------------------------------------------------
@dataclass
class Bundle:
    """A validated bundle: rows ready to merge, blobs verified and staged (call ``discard`` when done)."""

    path: str
    info: dict[str, Any]
    trials: list[TrialRecord] = field(default_factory=list)
    signatures: dict[str, dict[str, str]] = field(default_factory=dict)
    references: list[dict[str, str]] = field(default_factory=list)
    remeasurements: list[dict[str, str]] = field(default_factory=list)
    searches: list[dict[str, Any]] = field(default_factory=list)
    blobs: dict[str, Path] = field(default_factory=dict)
    staging: Path | None = None
    where: dict[tuple[str, str], str] = field(default_factory=dict)  # search row -> "member line N"

    def discard(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None


def write_bundle(dest: Path | IO[bytes], trials: list[TrialRecord], signatures: dict[str, dict[str, str]],
                 references: list[dict[str, str]] | None = None,
                 blobs: dict[str, tuple[Path, str]] | None = None, kind: str = "export",
                 remeasurements: list[dict[str, str]] | None = None,
                 searches: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Write a bundle to ``dest`` (a path, written atomically, or a binary file). ``blobs`` maps a sha256
    to (file, kind); each file is verified against its name first. Returns the manifest."""
    blobs = blobs or {}
    for sha, (path, _) in sorted(blobs.items()):
        if canonical.file_sha256(path) != sha:
            raise CacheError(f"blob {sha} in {path.parent} is corrupt (its bytes hash differently)",
                             "run `trt-routes cache verify` to evict it, then export again")
    ordered = sorted(trials, key=lambda t: t.id)
    tables = {
        # key order as stored (not sorted): an imported row is byte for byte the exported one
        "trials.jsonl": (_jsonl((trial_json(t) for t in ordered), sort_keys=False), len(ordered)),
        "signatures.jsonl": (_jsonl({"hash": h, "fields": signatures[h]} for h in sorted(signatures)),
                             len(signatures)),
        "references.jsonl": (_jsonl(sorted(references or [], key=lambda r: r["key"])), len(references or [])),
    }
    if remeasurements:
        tables["remeasurements.jsonl"] = (_jsonl(sorted(remeasurements, key=lambda r: r["key"])),
                                          len(remeasurements))
    if searches:
        tables["searches.jsonl"] = (_jsonl(sorted(searches, key=lambda r: (r["group_key"], r["strategy_key"]))),
                                    len(searches))
    manifest = {
        "format": FORMAT, "version": VERSION, "kind": kind, "created_at": now(), "host": socket.gethostname(),
        "tool_version": __version__,
        "members": {name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "rows": rows}
                    for name, (data, rows) in tables.items()},
        "blobs": {sha: {"size": path.stat().st_size, "kind": k} for sha, (path, k) in sorted(blobs.items())},
    }
    if isinstance(dest, Path):
        with atomic_output(dest) as f:
            _write_tar(f, manifest, tables, blobs)
    else:
        _write_tar(dest, manifest, tables, blobs)
    return manifest


def _write_tar(out: IO[bytes], manifest: dict[str, Any], tables: dict[str, tuple[bytes, int]],
               blobs: dict[str, tuple[Path, str]]) -> None:
    def info(name: str, size: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = size, 0, 0o644, 0, 0, "", ""
        return ti

    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="", compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        head = json.dumps(manifest, sort_keys=True, indent=1).encode()
        tar.addfile(info(MANIFEST, len(head)), io.BytesIO(head))
        for name, (data, _) in tables.items():
            tar.addfile(info(name, len(data)), io.BytesIO(data))
        for sha, (path, _) in sorted(blobs.items()):
            with open(path, "rb") as f:
                tar.addfile(info(f"blobs/{sha}", manifest["blobs"][sha]["size"]), f)


def _read_exact(f: IO[bytes], size: int, sink: Callable[[bytes], None]) -> str:
    h = hashlib.sha256()
    left = size
    while left:
        block = f.read(min(left, 1 << 20))
        if not block:
            break
        h.update(block)
        sink(block)
        left -= len(block)
    if left:
        raise BundleError("bundle ends inside a member (truncated)")
    return h.hexdigest()


def _check_manifest(head: Any, where: str) -> dict[str, Any]:
    def bad(msg: str, hint: str | None = None) -> BundleError:
        return BundleError(f"{where}: {msg}", hint or "the bundle is corrupt or was altered")

    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise bad("not a trt-routes bundle (its manifest names no 'trt-routes-bundle' format)")
    version = head.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise bad("bundle manifest has no integer version")
    if version > VERSION:
        raise bad(f"bundle format version {version} is newer than this trt-routes understands ({VERSION})",
                  "upgrade trt-routes (pip install -U trt-routes) on this machine")
    if version < 1:
        raise bad(f"bundle format version {version} is not a known version")
    members, blobs = head.get("members"), head.get("blobs")
    if not isinstance(members, dict) or not set(TABLES) <= set(members) <= set(TABLES + OPTIONAL_TABLES):
        raise bad(f"bundle manifest must list the members {', '.join(TABLES)} (and optionally "
                  f"{', '.join(OPTIONAL_TABLES)})")
    for name, m in members.items():
        if not (isinstance(m, dict) and isinstance(m.get("sha256"), str) and _HEX[64].match(m["sha256"])
                and _is_number(m.get("size")) and 0 <= m["size"] <= MAX_TABLE_BYTES
                and _is_number(m.get("rows")) and m["rows"] >= 0):
            raise bad(f"bundle manifest entry for {name} needs sha256, size (at most {MAX_TABLE_BYTES}) and rows")
    if not isinstance(blobs, dict):
        raise bad("bundle manifest 'blobs' must be an object {sha256: {size, kind}}")
    for sha, b in blobs.items():
        if not (_HEX[64].match(sha) and isinstance(b, dict) and _is_number(b.get("size")) and b["size"] >= 0
                and b.get("kind") in BLOB_KINDS):
            raise bad(f"bundle manifest blob entry {sha!r:.80} needs a sha256 name, a size and a kind")
    return head


class _Capped(io.RawIOBase):
    """A reader that refuses to give more than ``cap`` bytes: the decompressed stream of a bundle."""

    def __init__(self, inner: IO[bytes], cap: int, where: str) -> None:
        self.inner, self.cap, self.where, self.seen = inner, cap, where, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.inner.read(len(b))
        self.seen += len(data)
        if self.seen > self.cap:
            raise BundleError(f"{self.where}: decompresses to more than {self.cap} bytes ({MAX_EXPANSION}x its "
                              "size): refused as a decompression bomb before anything more was written",
                              "nothing from this bundle was merged; ask for a fresh export")
        b[:len(data)] = data
        return len(data)


def expansion_cap(size: int) -> int:
    """The most a bundle of ``size`` bytes on disk may decompress to."""
    return max(MIN_EXPANDED_BYTES, MAX_EXPANSION * size)


def read_bundle(source: Path, staging_root: Path | None = None, *, label: str | None = None) -> Bundle:
    """Read and validate the bundle at ``source``. Blobs are streamed into a fresh folder under
    ``staging_root`` (bundles with blobs need one) and verified by digest. Raises BundleError."""
    where = label or str(source)
    try:
        with open(source, "rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            cap = expansion_cap(os.fstat(raw.fileno()).st_size)
            inner: IO[bytes] = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if magic == b"\x1f\x8b" else raw
            stream = io.BufferedReader(_Capped(inner, cap, where), 1 << 16)
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                return _read_members(tar, where, staging_root, cap)
    except BundleError:
        raise
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError, zlib.error) as exc:
        raise BundleError(f"{where}: not a readable trt-routes bundle ({exc})",
                          "bundles are written by `trt-routes cache export`") from exc


def _read_members(tar: tarfile.TarFile, where: str, staging_root: Path | None, cap: int) -> Bundle:
    manifest: dict[str, Any] | None = None
    tables: dict[str, list[tuple[str, Any]]] = {}
    bundle = Bundle(path=where, info={})
    try:
        for member in tar:
            name = member.name
            if not member.isreg():
                raise BundleError(f"{where}: member {name!r:.120} is not a regular file (links, folders and "
                                  "devices are refused)", "the bundle was altered; ask for a fresh export")
            if manifest is None:
                if name != MANIFEST or member.size > MAX_MANIFEST_BYTES:
                    raise BundleError(f"{where}: not a trt-routes bundle (first member is {name!r:.120}, "
                                      f"expected {MANIFEST} of at most {MAX_MANIFEST_BYTES} bytes)",
                                      "bundles are written by `trt-routes cache export`")
                data = _member_bytes(tar, member, where)
                try:
                    head = loads_bounded(data)
                except ValueError as exc:
                    raise BundleError(f"{where}: bundle manifest is not JSON ({exc})") from exc
                manifest = _check_manifest(head, where)
                declared = sum(m["size"] for m in manifest["members"].values()) + sum(
                    b["size"] for b in manifest["blobs"].values())
                if declared > cap:
                    raise BundleError(f"{where}: its manifest declares {declared} bytes of members, more than "
                                      f"this {cap // MAX_EXPANSION}-byte file may expand to ({cap}): refused "
                                      "before anything was written", "ask for a fresh export")
                bundle.info = {k: manifest.get(k) for k in ("kind", "created_at", "host", "tool_version",
                                                             "version")}
                continue
            if name in manifest["members"]:
                declared_member = manifest["members"][name]
                if name in tables or member.size != declared_member["size"]:
                    raise BundleError(f"{where}: member {name} is duplicated or its size differs from the manifest")
                tables[name] = _member_rows(tar, member, where, declared_member["sha256"])
                continue
            match = _BLOB_NAME.match(name)
            if match is None:
                raise BundleError(f"{where}: unexpected member {name!r:.120}: bundles hold only "
                                  f"{MANIFEST}, {', '.join(TABLES)} and blobs/<sha256>; nothing is extracted "
                                  "by member name", "the bundle was altered; ask for a fresh export")
            sha = match.group(1)
            declared_blob = manifest["blobs"].get(sha)
            if declared_blob is None or sha in bundle.blobs or member.size != declared_blob["size"]:
                raise BundleError(f"{where}: blob {sha} is undeclared, duplicated, or its size differs "
                                  "from the manifest")
            if staging_root is None:
                raise BundleError(f"{where}: bundle carries blobs but no store was given to receive them")
            if bundle.staging is None:
                staging_root.mkdir(parents=True, exist_ok=True)
                bundle.staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=staging_root))
            dest = bundle.staging / sha
            f = tar.extractfile(member)
            assert f is not None
            with open(dest, "wb") as out:
                got = _read_exact(f, member.size, _writer(out))
            if got != sha:
                raise BundleError(f"{where}: blob {sha} is corrupt or tampered: its bytes hash to {got}",
                                  "nothing from this bundle was merged; ask for a fresh export")
            bundle.blobs[sha] = dest
        if manifest is None:
            raise BundleError(f"{where}: empty archive, not a trt-routes bundle")
        missing = [n for n in manifest["members"] if n not in tables] + [f"blobs/{s}" for s in manifest["blobs"]
                                                            if s not in bundle.blobs]
        if missing:
            raise BundleError(f"{where}: bundle lacks member(s) {', '.join(missing[:5])} (truncated?)")
        for name, rows in tables.items():
            if len(rows) != manifest["members"][name]["rows"]:
                raise BundleError(f"{where}: {name} has {len(rows)} rows, the manifest says "
                                  f"{manifest['members'][name]['rows']}")
        _parse_tables(bundle, tables, where)
        return bundle
    except BaseException:
        bundle.discard()
        raise


def _writer(out: IO[bytes]) -> Callable[[bytes], None]:
    def write(block: bytes) -> None:
        out.write(block)
    return write


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> bytes:
    f = tar.extractfile(member)
    assert f is not None
    buf = bytearray()
    _read_exact(f, member.size, buf.extend)
    return bytes(buf)


def _member_rows(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str, sha: str) -> list[tuple[str, Any]]:
    """A JSON Lines member decoded as it streams (never held whole), checked against ``sha`` at its end."""
    f = tar.extractfile(member)
    assert f is not None
    name = member.name
    rows: list[tuple[str, Any]] = []
    pending = bytearray()

    def line(raw: bytes) -> None:
        at = f"{where}: {name} line {len(rows) + 1}"
        try:
            rows.append((at, loads_bounded(raw.decode("utf-8"))))
        except (ValueError, UnicodeDecodeError) as exc:
            raise BundleError(f"{at}: not JSON ({exc})") from exc

    def sink(block: bytes) -> None:
        pending.extend(block)
        while (cut := pending.find(b"\n")) >= 0:
            line(bytes(pending[:cut]))
            del pending[:cut + 1]
        if len(pending) > MAX_ROW_BYTES:
            raise BundleError(f"{where}: {name} line {len(rows) + 1} is longer than {MAX_ROW_BYTES} bytes")

    got = _read_exact(f, member.size, sink)
    if got != sha:
        raise BundleError(f"{where}: {name} does not match its sha256 in the manifest (tampered?)")
    if pending.strip():
        line(bytes(pending))
    return rows


def _parse_tables(bundle: Bundle, tables: dict[str, list[tuple[str, Any]]], where: str) -> None:
    for at, obj in tables["signatures.jsonl"]:
        sig, fields_ = parse_signature(obj, at)
        bundle.signatures[sig] = fields_
    seen: set[str] = set()
    for at, obj in tables["trials.jsonl"]:
        trial = parse_trial(obj, at)
        if trial.id in seen:
            raise BundleError(f"{at}: trial {trial.id} appears twice")
        if trial.signature not in bundle.signatures:
            raise BundleError(f"{at}: trial {trial.id} names signature {trial.signature}, which the bundle "
                              "does not carry")
        seen.add(trial.id)
        bundle.trials.append(trial)
    for at, obj in tables["references.jsonl"]:
        bundle.references.append(parse_reference(obj, at))
    for at, obj in tables.get("remeasurements.jsonl", []):
        bundle.remeasurements.append(parse_remeasurement(obj, at))
    for at, obj in tables.get("searches.jsonl", []):
        row = parse_search(obj, at)
        bundle.searches.append(row)
        bundle.where[(row["group_key"], row["strategy_key"])] = at
