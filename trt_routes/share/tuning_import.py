"""trtexec ``--tuningCacheFile`` and Torch-TensorRT per-partition files as trials of one manifest job.

What a file does not say is recorded as "unknown", never guessed: the GPU, driver and TensorRT version,
the model's digest, the shapes and build settings. So imported trials live under their own signature
(with the file's format and a digest of its header) and never satisfy a job's cache lookup: `plan` and
`apply` ignore them, `explain JOB` lists them with the fields that differ."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes import canonical
from trt_routes.cache.store import TrialRecord
from trt_routes.errors import RouteError, UsageError
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.meta import TrialMeta
from trt_routes.interop.tuning_cache import (
    ImportedCache,
    TuningCacheFormatError,
    canonical_route,
    read_partition_caches,
    read_tuning_cache,
)
from trt_routes.share.merge import MergeReport, exclusive, merge
from trt_routes.share.rows import expected_group_key, expected_trial_id
from trt_routes.text import is_clean, sanitize, sanitize_data

if TYPE_CHECKING:
    from trt_routes.jobs import Job
    from trt_routes.project import Project

UNKNOWN = "unknown"
#: The signature fields of a TensorRT job (used when the job's own signature cannot be resolved here).
TENSORRT_FIELDS = ("device", "gpu_name", "compute_capability", "sm_count", "gpu_memory_gib", "driver_version",
                   "cuda_driver", "backend_distribution", "tensorrt_cuda", "backend", "backend_version",
                   "tuner_version", "catalog_digest", "protocol")
#: Sources of rows that are not our own measurements (store.latest_for_job leaves them out).
SOURCE_PREFIXES = ("trtexec:", "torch-tensorrt:")


def sniff(path: Path) -> str:
    """'bundle', 'tuning-cache' or 'partitions' (a Torch-TensorRT base path), by content."""
    if not path.exists():
        return "partitions"
    if not path.is_file():
        raise UsageError(f"{path} is not a file", "pass a bundle, a trtexec tuning cache or a partition file")
    with open(path, "rb") as f:
        head = f.read(512)
    if head[:2] == b"\x1f\x8b" or head[257:262] == b"ustar":
        return "bundle"
    if head.lstrip()[:1] == b"{":
        return "tuning-cache"
    raise UsageError(f"{path} is neither a trt-routes bundle (tar.gz from `cache export`) nor a trtexec / "
                     "Torch-TensorRT tuning cache (JSON Lines)", None)


def _file_time(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _signature(cache: ImportedCache, job: Job) -> dict[str, str]:
    names = set(job.signature.fields) if job.signature is not None else set(TENSORRT_FIELDS)
    fields = {name: UNKNOWN for name in names}
    header = cache.header
    header_line = json.dumps({k: v for k, v in header.__dict__.items() if k != "unknown"}, sort_keys=True,
                             default=list)
    fields.update({
        "backend": "tensorrt", "device": "gpu",
        "tuner_version": header.tuner_version or UNKNOWN,
        "protocol": f"{header.source} ({header.time_statistic})",
        "origin": header.source,
        "origin_header": hashlib.sha256(header_line.encode()).hexdigest()[:16],
    })
    return fields


def _routes(cache: ImportedCache, job: Job) -> list[str]:
    """Canonical routes: the job's catalog when it is this tuner's, else the header's default route."""
    if job.catalog is not None and cache.tuner_mismatch(job.catalog) is None:
        try:
            return [canonical_route(r.build_route, job.catalog, {}) for r in cache.rows]
        except RouteError:
            pass
    return [r.route for r in cache.rows]


def tuning_trials(cache: ImportedCache, job: Job, created_at: str) -> tuple[list[TrialRecord], dict[str, str]]:
    """Trials (and their signature fields) for the rows of one tuning cache attached to ``job``."""
    fields = _signature(cache, job)
    sig = canonical.digest(fields, 16)
    header = cache.header
    metric = header.metric or UNKNOWN
    trials: dict[str, TrialRecord] = {}
    for row, route in zip(cache.rows, _routes(cache, job), strict=True):
        if not is_clean(route, newlines=False):
            raise UsageError(f"{cache.path}:{row.line}: build route {route!r:.80} carries control characters or "
                             "escape sequences", "the file is corrupt or was altered")
        if row.gpu_time_ms is not None and not (math.isfinite(row.gpu_time_ms) and row.gpu_time_ms > 0):
            raise UsageError(f"{cache.path}:{row.line}: gpu_time {row.gpu_time_ms!r} is not a time (more than 0 ms)",
                             "the file is corrupt or was altered")
        losses = {out: {metric: math.nan if v is None else float(v)} for out, v in (row.accuracy_loss or {}).items()}
        meta: dict[str, Any] = {"imported": {
            "format": header.source, "file": cache.path, "line": row.line, "iter": row.iter,
            "build_route": row.build_route, "crash": row.crash, "time_statistic": header.time_statistic,
            "accuracy": {"algorithm": header.accuracy_algorithm, "atol": header.atol, "rtol": header.rtol,
                         "threshold": header.threshold},
            "tuner_version": header.tuner_version, "partition_key": header.partition_key,
            "searching_algorithm": header.searching_algorithm, "tuning_expr": header.tuning_expr,
            "created_at": "the file's modification time", "unknown": row.unknown}}
        trial = TrialRecord(
            id="", group_key="", job=job.name, route=route, signature=sig, model_digest=UNKNOWN,
            shape_key=UNKNOWN, settings_key=UNKNOWN, protocol_key=UNKNOWN, reference_key=UNKNOWN,
            backend="tensorrt", status=TrialStatus(row.status), median_ms=row.gpu_time_ms, losses=losses,
            error=sanitize("; ".join(p for p in (row.error_message, row.note) if p)),
            meta=TrialMeta.from_json(sanitize_data(meta)), created_at=created_at,
            host=UNKNOWN, source=f"{header.source}:{cache.path}")
        trial.group_key = expected_group_key(trial)
        trial.id = expected_trial_id(trial)
        if trial.id not in trials:  # a route tried twice in one sweep: the first row stands
            trials[trial.id] = trial
    return list(trials.values()), fields


def read_any_tuning_cache(path: Path) -> list[tuple[ImportedCache, Path]]:
    """One file (format from its header), or every partition file of a Torch-TensorRT base path."""
    path = path.resolve()
    if path.exists():
        return [(read_tuning_cache(path), path)]
    try:
        parts = read_partition_caches(path)
    except TuningCacheFormatError as exc:
        if "no partition files" not in exc.message:
            raise
        raise UsageError(f"{path}: no such file, and no Torch-TensorRT partition files next to it "
                         f"({exc.message})", "pass a bundle, a trtexec tuning cache, or a partition base path"
                         ) from None
    return [(c, Path(c.path)) for _, c in sorted(parts.items())]


def import_tuning_cache(project: Project, path: Path, job_name: str | None) -> list[MergeReport]:
    """Import a trtexec / Torch-TensorRT tuning cache as trials of manifest job ``job_name``."""
    from trt_routes.jobs import find_job

    files = read_any_tuning_cache(path)
    if not job_name:
        names = ", ".join(j.name for j in project.jobs[:6]) + (", ..." if len(project.jobs) > 6 else "")
        raise UsageError(f"{path} is a tuning cache: its rows need a manifest job to attach to",
                         f"pass --job NAME (jobs: {names or 'none'})")
    job = find_job(project.jobs, job_name)
    if job.backend != "tensorrt":
        raise UsageError(f"job {job.name} uses backend '{job.backend}'; a tuning cache holds TensorRT trials",
                         "attach it to a job whose backend is tensorrt")
    reports = []
    with exclusive(project, f"cache import {path}"), project.open_cache() as cache:
        for imported, file in files:
            trials, fields = tuning_trials(imported, job, _file_time(file))
            reports.append(merge(cache, trials, {trials[0].signature if trials else
                                                 canonical.digest(fields, 16): fields},
                                 source=f"{imported.header.source}:{imported.path}"))
    return reports
