"""Synthetic trials written into a real project's SQLite cache (as an import would write them)."""

from __future__ import annotations

import numpy as np

from trt_routes.cache.store import TrialRecord
from trt_routes.jobs import Job
from trt_routes.project import Project

JOB = "cnn/bs1/cpu"
OK = {"logits": {"cos": 1e-9, "lInf": 1e-6}}
THREADS1, THREADS2, BASIC, NCHWC = ("-intra_op_num_threads=1", "-intra_op_num_threads=2",
                                    "-graph_optimization_level=basic", "-disable:NchwcTransformer=on")


def samples(center: float, n: int = 40, spread: float = 0.02, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(x) for x in center * (1 + spread * rng.standard_normal(n))]


def record(job: Job, route: str, status: str = "ok", center: float | None = None, *,
           losses: dict[str, dict[str, float]] | None = None, error: str = "", source: str = "local",
           keep_samples: bool = True, spread: float = 0.02, group_key: str | None = None, signature: str | None = None,
           created_at: str = "2026-01-02T03:04:05Z") -> TrialRecord:
    xs = samples(center, spread=spread, seed=len(route)) if center is not None else []
    median = float(np.median(xs)) if xs else None
    assert job.signature is not None
    return TrialRecord(
        id=job.trial_id(route) if group_key is None else f"{group_key}-{route}", group_key=group_key or job.group_key,
        job=job.name, route=route, signature=signature or job.signature.hash, backend=job.backend, status=status,
        median_ms=median, ci_low=median * 0.97 if median else None, ci_high=median * 1.03 if median else None,
        samples=xs if keep_samples else [], losses=losses if losses is not None else (OK if median else {}),
        error=error, build_s=0.5 if status != "timeout" else None, source=source, host="box-a",
        created_at=created_at, **job.key_parts())


def put(project: Project, *records: TrialRecord, fields: dict[str, str] | None = None) -> None:
    with project.open_cache() as cache:
        for r in records:
            cache.add_trial(r, fields)
