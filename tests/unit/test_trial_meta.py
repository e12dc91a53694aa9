"""evidence/meta.py: a trial's metadata as a typed record that reads and writes back every stored object
as it was, keys it does not know and values of the wrong type included."""

from __future__ import annotations

import json
from pathlib import Path

from trt_routes.cache.store import CacheStore, TrialRecord
from trt_routes.evidence import TrialStatus
from trt_routes.evidence.meta import TrialMeta

WRITTEN = {"loadavg": 0.5, "cpu_count": 2, "cpu_ticks": 40, "cpu_busy": 0.3, "cpu_busy_others": 0.1,
           "settle_runs": 6, "settled": True, "settle_medians_ms": [1.0, 1.01], "worker_s": 0.8, "worker": "w0",
           "facts": {"latency.p50": 1.0}, "profile_points": ["min", "opt", "max"],
           "loss_points": {"y": {"cos": "max"}}, "imported": {"format": "trtexec", "line": 3}}


def test_every_known_key_is_a_field_and_the_object_round_trips() -> None:
    meta = TrialMeta.from_json(WRITTEN)
    assert not meta.extra and meta.cpu_busy_others == 0.1 and meta.loss_points == {"y": {"cos": "max"}}
    assert meta.to_json() == WRITTEN


def test_unknown_keys_and_wrong_types_are_kept_as_they_were() -> None:
    """A newer version's key, and an older row's value of another type: read into ``extra``, written back."""
    stored = {"cpu_busy_others": True, "worker_s": "fast", "future_key": {"x": [1]}, "node": None, "cpu_count": 2}
    meta = TrialMeta.from_json(stored)
    assert meta.cpu_busy_others is None and meta.worker_s is None and meta.node is None and meta.cpu_count == 2
    assert meta.extra == {"cpu_busy_others": True, "worker_s": "fast", "future_key": {"x": [1]}, "node": None}
    assert meta.to_json() == stored


def test_the_cache_column_holds_the_same_object(tmp_path: Path) -> None:
    trial = TrialRecord(id="t", group_key="g", job="j", route="", signature="s", model_digest="m", shape_key="x",
                        settings_key="y", protocol_key="p", reference_key="r", backend="onnxruntime",
                        status=TrialStatus.OK, meta=TrialMeta.from_json({**WRITTEN, "later": 1}))
    with CacheStore(tmp_path / "c.sqlite") as cache:
        cache.add_trial(trial)
        (column,) = cache.conn.execute("SELECT meta FROM trials").fetchone()
        assert json.loads(column) == {**WRITTEN, "later": 1}
        assert cache.group("g")[""].meta == trial.meta
