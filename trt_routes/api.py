"""The Python API: what the CLI does, as calls that return values (no printing, no exit codes).

    from trt_routes import api

    project = api.open_project("tuning.yaml")
    api.plan(project)              # what apply would do, per job, and why
    result = api.apply(project)    # tune, write engines/ and tuning.lock
    api.explain(project, "resnet-like/bs8/cpu")
    api.status(project)
    api.trials(project)            # every trial as a flat record; api.trials_frame(project): a DataFrame

Errors are ``trt_routes.errors.TrtRoutesError`` subclasses carrying a message, a hint and an exit code.
docs/api.md documents every call with examples that tests execute. The top layer beside ``cli``."""

from __future__ import annotations

import csv
import fnmatch
import io
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trt_routes.audit.explain import Explanation
from trt_routes.audit.explain import explain as _explain
from trt_routes.audit.status import JobStatus
from trt_routes.audit.status import status as _status
from trt_routes.plan.diff import Plan
from trt_routes.project import Project
from trt_routes.project import open_project as _open_project
from trt_routes.scaffold.write import InitResult, init_manifest, write_example
from trt_routes.tune.apply import ApplyOptions, ApplyResult, compute_plan
from trt_routes.tune.apply import apply as _apply

if TYPE_CHECKING:
    import pandas

__all__ = ["ApplyResult", "Explanation", "InitResult", "JobStatus", "Plan", "Project", "Trial", "apply", "explain",
           "init", "init_example", "open_project", "plan", "status", "trials", "trials_csv", "trials_frame"]


def open_project(manifest: str | Path = "tuning.yaml") -> Project:
    """Load and validate ``manifest``, detect this machine and expand the jobs (as ``trt-routes validate``)."""
    return _open_project(Path(manifest))


def plan(project: Project, only: Sequence[str] | None = None) -> Plan:
    """Per job: the action apply would take and why (``plan.jobs``; ``plan.has_work``). Builds nothing."""
    with project.read_cache() as cache:
        return compute_plan(project, cache, project.read_lock(), list(only) if only else None)


def apply(project: Project, *, only: Sequence[str] | None = None, keep_going: bool = False,
          dry_run: bool = False, workers: int | None = None) -> ApplyResult:
    """Tune what is missing or stale, materialize the engines and write tuning.lock (``trt-routes apply``).
    ``result.exit_code`` is the code the CLI would exit with; ``result.outcomes`` one entry per job."""
    options = ApplyOptions.from_flags(only=list(only) if only else None, keep_going=keep_going, dry_run=dry_run,
                                      workers=workers)
    return _apply(project, options)


def explain(project: Project, job: str) -> Explanation:
    """Why ``job``'s route was chosen: its trials and verdicts, the decision, provenance and history."""
    return _explain(project, job)


def status(project: Project) -> list[JobStatus]:
    """One state per job: ok, no-lock, invalid-lock, missing-engine, digest-mismatch, stale, not-in-cache, blocked,
    orphan-lock (``trt-routes status``)."""
    return _status(project)


def init(models: Sequence[str | Path], out: str | Path = "tuning.yaml", *,
         dims: Mapping[str, tuple[int, int, int]] | None = None, strategy: str = "tuned",
         force: bool = False) -> InitResult:
    """Write a tuning.yaml for ``models`` (ONNX files) on this machine (``trt-routes init``); ``dims`` gives
    each symbolic dimension's (min, opt, max)."""
    return init_manifest([Path(m) for m in models], Path(out), dims=dims, strategy=strategy, force=force)


def init_example(folder: str | Path = ".", *, force: bool = False) -> InitResult:
    """Write the quickstart project into ``folder`` (``trt-routes init --example``)."""
    return write_example(Path(folder), force=force)


@dataclass(frozen=True)
class Trial:
    """One trial as a flat record. ``losses`` maps ``output:metric`` to the loss against the reference."""

    job: str
    route: str
    status: str
    median_ms: float | None
    ci_low_ms: float | None
    ci_high_ms: float | None
    mean_ms: float | None
    stdev_ms: float | None
    build_s: float | None
    measure_s: float | None
    backend: str
    signature: str
    engine_sha256: str
    error: str
    source: str
    host: str
    created_at: str
    id: str
    losses: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The record with each loss as its own ``loss:OUTPUT:METRIC`` key (one column each)."""
        row = asdict(self)
        losses = row.pop("losses")
        return {**row, **{f"loss:{k}": v for k, v in sorted(losses.items())}}


def trials(project: Project, job: str | None = None) -> list[Trial]:
    """Every trial in the project's cache (only jobs matching the fnmatch pattern ``job``), oldest first.
    Reads the cache; an absent cache has no trials."""
    if not project.cache_path.exists():
        return []
    with project.open_cache(create=False) as cache:
        records = cache.all_trials()
    return [Trial(job=r.job, route=r.route, status=r.status, median_ms=r.median_ms, ci_low_ms=r.ci_low,
                  ci_high_ms=r.ci_high, mean_ms=r.mean_ms, stdev_ms=r.stdev_ms, build_s=r.build_s,
                  measure_s=r.measure_s, backend=r.backend, signature=r.signature, engine_sha256=r.engine_sha256,
                  error=r.error, source=r.source, host=r.host, created_at=r.created_at, id=r.id,
                  losses={f"{out}:{metric}": value for out, by in sorted(r.losses.items())
                          for metric, value in sorted(by.items())})
            for r in records if job is None or fnmatch.fnmatchcase(r.job, job)]


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    fixed = [name for name in Trial.__dataclass_fields__ if name != "losses"]
    return fixed + sorted({k for row in rows for k in row if k.startswith("loss:")})


def trials_csv(project: Project, job: str | None = None) -> str:
    """The trials as CSV text: one row per trial, a header, one ``loss:OUTPUT:METRIC`` column per loss."""
    rows = [t.to_dict() for t in trials(project, job)]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=_columns(rows), restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def trials_frame(project: Project, job: str | None = None) -> pandas.DataFrame:
    """The trials as a pandas DataFrame (the columns of ``trials_csv``). Needs pandas (``pip install pandas``)."""
    try:
        import pandas as pd
    except ImportError:
        from trt_routes.errors import UsageError

        raise UsageError("trials_frame needs pandas, which is not installed",
                         "pip install pandas, or use api.trials() (records) or api.trials_csv()") from None
    rows = [t.to_dict() for t in trials(project, job)]
    return pd.DataFrame(rows, columns=_columns(rows))
