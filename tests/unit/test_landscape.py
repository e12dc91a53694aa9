"""Landscape files: schema validation, the seeded block sampler, and the replay backend's determinism."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trt_routes.backends import landscape as ls
from trt_routes.backends.base import BuildSpec
from trt_routes.backends.replay import ENV_VAR, ReplayBackend, output_with_losses, reference_output
from trt_routes.errors import UsageError
from trt_routes.evidence.measure import losses


def small(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema": ls.SCHEMA, "backend": "test",
        "knobs": [{"option": "-a", "values": ["0", "1"], "default": "0"},
                  {"option": "-b", "values": ["x", "y", "z"], "default": "x"}],
        "routes": [
            {"route": "", "status": "ok", "samples_ms": [1.0, 1.1, 1.2, 0.9, 1.0, 5.0], "losses": {"cos": 0.0},
             "build_s": 0.5},
            {"route": "-a=1", "status": "ok", "samples_ms": [0.5, 0.6, 0.55], "losses": {"cos": 1e-7, "lInf": 1e-4}},
            {"route": "-b=y", "status": "build-error"},
            {"route": "-a=1 -b=z", "status": "accuracy-failed", "losses": {"cos": None}},
        ],
    }
    data.update(over)
    return data


def test_valid_file_round_trips_through_dump(tmp_path: Path) -> None:
    land = ls.validate(small())
    assert land.catalog.backend == "replay" and land.catalog.options == ["-a", "-b"]
    assert land.true_median("") == pytest.approx(1.05) and land.true_median("-b=y") is None
    assert land.get("-b=z") is None  # absent: a crashed build
    path = tmp_path / "l.json"
    path.write_text(ls.dump(land))
    again = ls.load(path)
    assert again.digest == land.digest and again.expression_text() == "-a=[0|1] -b=[x|y|z]"


@pytest.mark.parametrize("change, message", [
    ({"schema": "trt-routes/landscape@2"}, "schema"),
    ({"extra": 1}, "extra"),
    ({"knobs": [{"option": "-a", "values": ["0", "1"], "default": "2"}]}, "default '2' is not one of"),
    ({"routes": [{"route": "-a=0", "samples_ms": [1.0]}]}, "is not canonical"),
    ({"routes": [{"route": "-b=y -a=1", "samples_ms": [1.0]}]}, "write it as '-a=1 -b=y'"),
    ({"routes": [{"route": "-c=1", "samples_ms": [1.0]}]}, "unknown knob"),
    ({"routes": [{"route": "-a=2", "samples_ms": [1.0]}]}, "-a=2"),
    ({"routes": [{"route": "", "samples_ms": [1.0]}, {"route": "", "samples_ms": [2.0]}]}, "appears twice"),
    ({"routes": [{"route": "", "status": "ok"}]}, "no samples_ms"),
    ({"routes": [{"route": "", "samples_ms": [1.0, -1.0]}]}, "finite positive"),
])
def test_invalid_files_name_the_problem(change: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as err:
        ls.validate(small(**change), "f.json")
    assert "f.json" in err.value.message and message in str(err.value)


def test_load_reports_bad_json_with_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"schema": ')
    with pytest.raises(UsageError, match=r"bad.json:1:\d+: not JSON"):
        ls.load(path)


def test_block_draws_are_seeded_and_come_from_the_recording() -> None:
    land = ls.validate(small())
    a = land.draw("", 4, 3, np.random.default_rng(7))
    b = land.draw("", 4, 3, np.random.default_rng(7))
    c = land.draw("", 4, 3, np.random.default_rng(8))
    assert a == b and a != c and len(a) == 12
    assert set(a) <= set(land.get("").samples_ms)  # type: ignore[union-attr]
    with pytest.raises(KeyError):
        land.draw("-b=y", 1, 1, np.random.default_rng(0))


def test_replay_outputs_reproduce_recorded_losses() -> None:
    ref = {"y": reference_output()}
    for rec in ({"cos": 0.0, "lInf": 0.0}, {"cos": 1e-7, "lInf": 1e-3}, {"cos": 2e-4, "lInf": 0.05},
                {"lInf": 2e-5}, {"cos": 3e-9, "lInf": 1e-5}):
        got = losses({"y": output_with_losses(rec)}, ref)["y"]
        assert got["lInf"] == pytest.approx(rec.get("lInf", 0.0), rel=1e-9, abs=1e-12)
        assert got["cos"] == pytest.approx(rec.get("cos", got["cos"]), rel=1e-3, abs=1e-12)
    assert np.isnan(output_with_losses({"cos": None})).all()


def test_replay_backend_is_deterministic_per_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "l.json"
    path.write_text(json.dumps(small()))
    monkeypatch.setenv(ENV_VAR, str(path))
    backend = ReplayBackend()
    assert backend.unavailable_reason() is None and backend.catalog().get("-a") is not None

    def measure(seed: int) -> list[list[float]]:
        spec = BuildSpec(model_path=str(path), route={"-a": "1"}, profile={}, settings={"replay_seed": seed})
        engine = tmp_path / f"e{seed}.replay.json"
        backend.build(spec, engine)
        runner = backend.load(engine, spec)
        return [runner.time({}, 0, 3, 2) for _ in range(3)]

    first, again, other = measure(1), measure(1), measure(2)
    assert first == again and first != other
    assert first[0] != first[1]  # successive measurements draw anew
    with pytest.raises(RuntimeError, match="recorded build error"):
        backend.build(BuildSpec(model_path=str(path), route={"-b": "y"}, profile={}), tmp_path / "x")
    monkeypatch.delenv(ENV_VAR)
    assert ENV_VAR in (ReplayBackend().unavailable_reason() or "")


def test_replay_in_real_workers_absent_route_crashes_recorded_failures_replay(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trt_routes.project import open_project
    from trt_routes.tune.apply import apply

    data = small()
    data["routes"] = [r for r in data["routes"] if r["route"] != "-a=1"]  # absent: a crashed build
    data["routes"].append({"route": "-b=z", "status": "ok", "samples_ms": [0.5, 0.6, 0.7]})
    land = tmp_path / "l.json"
    land.write_text(json.dumps(data))
    monkeypatch.setenv(ENV_VAR, str(land))
    (tmp_path / "tuning.yaml").write_text(f"""
schema_version: 1
measurement: {{warmup: 0, iterations: 2, repeats: 2, timeout_s: 30, settle: false}}
switch_groups: {{g: "-a=[0|1] -b=[x|y|z]"}}
strategies: {{s: {{mode: full, confirm: false}}}}
tolerances: {{t: {{checks: [{{metric: cos, threshold: 1.0e-4}}]}}}}
defaults: {{backend: replay, switch_group: g, strategy: s, tolerance: t}}
models: {{m: {{path: {land}, shapes: {{a: {{x: [1]}}}}}}}}
""")
    result = apply(open_project(tmp_path / "tuning.yaml"))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    project = open_project(tmp_path / "tuning.yaml")
    with project.open_cache() as cache:
        status = {t.route: t.status for t in cache.all_trials()}
    assert status["-a=1"] == "crashed" and status["-b=y"] == "build-error"
    assert status["-a=1 -b=z"] == "accuracy-failed" and status["-b=z"] == "ok"
    assert result.outcomes[0].selection is not None and result.outcomes[0].selection.winner == "-b=z"
