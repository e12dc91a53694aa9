"""Failed values from related jobs' trials (trt_routes.search.priors): a value is avoided when a failed trial held
it and no successful trial did; non-finite losses count as a failure; related jobs come nearest first."""

from __future__ import annotations

import math

from trt_routes.cache.store import TrialRecord
from trt_routes.search.priors import failed_values, related_names


def _trial(route: str, status: str, losses: dict[str, dict[str, float]] | None = None) -> TrialRecord:
    return TrialRecord(id=route or "d", group_key="g", job="j", route=route, signature="s", model_digest="m",
                       shape_key="x", settings_key="y", protocol_key="p", reference_key="r", backend="replay",
                       status=status, median_ms=1.0 if status == "ok" else None, losses=losses or {})


def test_a_value_in_a_failed_trial_and_in_no_successful_one_is_avoided() -> None:
    trials = [_trial("-a=1 -b=1", "crashed"), _trial("-a=1 -c=2", "ok", {"y": {"cos": 0.0}}),
              _trial("-d=1", "ok", {"y": {"cos": math.inf}}), _trial("-e=1", "timeout"), _trial("", "ok")]
    assert failed_values(trials) == ("-b=1", "-d=1", "-e=1")


def test_related_jobs_nearest_first() -> None:
    names = ["m/b/cpu", "m/a/gpu", "n/a/cpu", "n/a/gpu", "m/a/cpu"]
    assert related_names("m/a/cpu", "m", "cpu", names) == ["m/b/cpu", "m/a/gpu", "n/a/cpu"]
