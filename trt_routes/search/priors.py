"""What related jobs' trials say about a search's knob values (issue 30: use what the cache knows).

A value that failed for a related job (its build crashed, errored or timed out, or its outputs were not finite)
and never appeared in one of that job's successful trials is screened last: a group of values that holds it
would fail and teach nothing about the others. Pure: reads trial records, returns ``option=value`` strings."""

from __future__ import annotations

__all__ = ["failed_values", "related_names"]

import math
from collections.abc import Iterable

from trt_routes.cache.store import TrialRecord
from trt_routes.errors import RouteError
from trt_routes.evidence import TrialStatus
from trt_routes.routes import route_dict

#: At most this many related jobs are read for failed values (the nearest first).
MAX_RELATED = 8


def related_names(job: str, model: str, target: str, names: Iterable[str]) -> list[str]:
    """Other jobs related to ``job``, nearest first: the same model on this target (another shape), the same
    model on another target, then other models on this target."""
    prefix, suffix = f"{model}/", f"/{target}"
    return [name for _, name in sorted(
        [(0 if name.endswith(suffix) else 1, name) for name in names if name.startswith(prefix) and name != job]
        + [(2, name) for name in names if name.endswith(suffix) and not name.startswith(prefix) and name != job])]


def _failed(trial: TrialRecord) -> bool:
    if trial.status in (TrialStatus.CRASHED, TrialStatus.BUILD_ERROR, TrialStatus.TIMEOUT, TrialStatus.ACCURACY_FAILED):
        return True
    return trial.status == TrialStatus.OK and any(isinstance(v, (int, float)) and not math.isfinite(v)
                                        for losses in (trial.losses or {}).values() for v in losses.values())


def failed_values(trials: Iterable[TrialRecord]) -> tuple[str, ...]:
    """``option=value`` of every non-default value in a failed trial that no successful trial holds."""
    suspects: set[str] = set()
    cleared: set[str] = set()
    for trial in trials:
        try:
            units = {f"{o}={v}" for o, v in route_dict(trial.route).items()}
        except RouteError:
            continue
        if _failed(trial):
            suspects |= units
        elif trial.status == TrialStatus.OK:
            cleared |= units
    return tuple(sorted(suspects - cleared))
