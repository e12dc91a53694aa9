"""Generative landscapes (``trt-routes/landscape@2``): validation errors with their position, the true-time
formula, seeded reproducible samples, and a replay of one through ``apply`` in real workers."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trt_routes.backends import landscape as ls
from trt_routes.backends.base import BuildSpec
from trt_routes.backends.landscape_model import FORMAT, validate_model
from trt_routes.backends.replay import ENV_VAR, ReplayBackend
from trt_routes.errors import UsageError


def model(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": FORMAT,
        "knobs": [{"option": "-a", "values": ["0", "1"], "default": "0"},
                  {"option": "-b", "values": ["x", "y", "z"], "default": "x"},
                  {"option": "-c", "values": ["0", "1"], "default": "0"},
                  {"option": "-d", "values": ["0", "1"], "default": "0"}],
        "failures": [{"when": {"-b": "y"}, "status": "build-error"},
                     {"when": {"-a": "1", "-b": "z"}, "status": "accuracy-failed"},
                     {"when": {"-b": "z"}, "status": "crashed"}],
        "profiles": {"p": {"base_ms": 2.0,
                           "effects": {"-a": {"1": -0.2}, "-c": {"1": 0.004}, "-d": {"1": 0.003}},
                           "interactions": [{"when": {"-a": "1", "-c": "1"}, "log": -0.1}],
                           "clip": [{"options": ["-c", "-d"], "limit": 0.005}],
                           "noise": {"trial": 0.0, "repeat": 0.0, "run": 0.0}, "build_s": 60.0}},
    }
    data.update(over)
    return data


def test_true_time_follows_the_formula() -> None:
    land = validate_model(model())
    assert land.catalog.options == ["-a", "-b", "-c", "-d"]
    assert land.true_ms("", "p") == pytest.approx(2.0)
    assert land.true_ms("-a=1", "p") == pytest.approx(2.0 * math.exp(-0.2))
    # -c and -d share a clip entry: 0.004 + 0.003 is clipped to 0.005
    assert land.true_ms("-c=1 -d=1", "p") == pytest.approx(2.0 * math.exp(0.005))
    assert land.true_ms("-c=1", "p") == pytest.approx(2.0 * math.exp(0.004))
    # the interaction adds when both assignments hold
    assert land.true_ms("-a=1 -c=1", "p") == pytest.approx(2.0 * math.exp(-0.2 + 0.004 - 0.1))


def test_failures_first_matching_rule_decides() -> None:
    land = validate_model(model())
    assert land.status("") == "ok" and land.status("-a=1") == "ok"
    assert land.status("-b=y") == "build-error" and land.status("-a=1 -b=y") == "build-error"
    assert land.status("-a=1 -b=z") == "accuracy-failed" and land.status("-b=z") == "crashed"
    # a rule naming a default value holds for routes that leave that knob at its default
    at_default = validate_model(model(failures=[{"when": {"-a": "0", "-c": "1"}, "status": "timeout"}]))
    assert at_default.status("-c=1") == "timeout" and at_default.status("-a=1 -c=1") == "ok"


def _profile_change(path: list[str], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(model())
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


@pytest.mark.parametrize("data, message", [
    (model(format="trt-routes/landscape@3"), "format"),
    (model(extra=1), "extra"),
    (_profile_change(["profiles", "p", "base_ms"], 0), "profiles.p.base_ms"),
    (_profile_change(["profiles", "p", "effects"], {"-x": {"1": 0.1}}), "profiles.p.effects.-x: unknown knob"),
    (_profile_change(["profiles", "p", "effects"], {"-a": {"2": 0.1}}), "profiles.p.effects.-a: value '2'"),
    (_profile_change(["profiles", "p", "noise"], {"trial": -1}), "profiles.p.noise.trial"),
    (_profile_change(["profiles", "p", "noise"], {"run": 400}), "profiles.p.noise.run"),  # drew 0 ms and 1e240
    (_profile_change(["profiles", "p", "interactions"], [{"when": {"-b": "w"}, "log": 1}]),
     "profiles.p.interactions.0.when.-b: value 'w'"),
    (_profile_change(["profiles", "p", "clip"], [{"options": ["-c"], "limit": 1}, {"options": ["-c"], "limit": 1}]),
     "profiles.p.clip.1.options: '-c' is in more than one"),
    (_profile_change(["profiles", "p", "optimum"], {"route": "-b=y -a=1", "ms": 1.0}), "write it as '-a=1 -b=y'"),
    (model(failures=[{"when": {"-q": "1"}, "status": "crashed"}]), "failures.0.when.-q: unknown knob"),
    (model(failures=[{"when": {"-a": "1"}, "status": "slow"}]), "failures.0.status"),
    (model(knobs=[{"option": "-a", "values": ["0", "1"], "default": "2"}], profiles={"p": {"base_ms": 1}}),
     "knobs.0.default: '2' is not one of"),
    # times a float cannot hold (apply then drew NaN and report failed with an OverflowError traceback)
    (_profile_change(["profiles", "p", "base_ms"], 1e308), "profiles.p: its routes' times could run from"),
    (_profile_change(["profiles", "p", "effects"], {"-a": {"1": 700}}), "between 1e-06 and 1e+09 ms"),
    (_profile_change(["profiles", "p", "interactions"], [{"when": {"-b": "y"}, "log": -40}]), "profiles.p: its"),
])
def test_invalid_files_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as err:
        validate_model(data, "m.json")
    assert "m.json" in err.value.message and message in err.value.message


def test_load_any_reads_both_formats_and_load_wants_at_1(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model()))
    land = ls.load_any(path)
    assert land.catalog.version == "landscape@2" and land.expression_text().startswith("-a=[0|1] -b=[x|y|z]")
    with pytest.raises(UsageError, match="landscape@1 file"):
        ls.load(path)


def _measure(backend: ReplayBackend, path: Path, tmp_path: Path, seed: int, shape: str = "p") -> list[list[float]]:
    spec = BuildSpec(model_path=str(path), route={"-a": "1"}, profile={}, settings={"replay_seed": seed},
                     shape=shape)
    engine = tmp_path / f"e{seed}.replay.json"
    backend.build(spec, engine)
    runner = backend.load(engine, spec)
    return [runner.time({}, 0, 50, 4) for _ in range(3)]


def test_samples_are_seeded_and_centred_on_the_true_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_profile_change(["profiles", "p", "noise"], {"trial": 0.01, "repeat": 0.01,
                                                                              "run": 0.02})))
    monkeypatch.setenv(ENV_VAR, str(path))
    backend = ReplayBackend()
    first, again, other = (_measure(backend, path, tmp_path, s) for s in (1, 1, 2))
    assert first == again and first != other and first[0] != first[1]
    true = 2.0 * math.exp(-0.2)
    pooled = np.concatenate([np.asarray(m) for m in first + other])
    # six measurements' trial offsets (sd 1%) and repeats (sd 1%): well within 5% of the true time
    assert abs(float(np.median(pooled)) / true - 1) < 0.05
    assert len(first[0]) == 200 and min(pooled) > 0


def test_profiles_are_chosen_by_shape_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = model()
    data["profiles"]["q"] = {**data["profiles"]["p"], "base_ms": 4.0}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv(ENV_VAR, str(path))
    backend = ReplayBackend()
    p, q = _measure(backend, path, tmp_path, 0, "p"), _measure(backend, path, tmp_path, 0, "q")
    assert p[0][0] == pytest.approx(2.0 * math.exp(-0.2)) and q[0][0] == pytest.approx(4.0 * math.exp(-0.2))
    with pytest.raises(UsageError, match="no profile named 'r'"):
        _measure(backend, path, tmp_path, 0, "r")


def replay_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str) -> Path:
    """A manifest that tunes ``model()`` (served by the replay backend) over ``group``, every route (mode full)."""
    land = tmp_path / "m.json"
    land.write_text(json.dumps(model()))
    monkeypatch.setenv(ENV_VAR, str(land))
    (tmp_path / "tuning.yaml").write_text(f"""
schema_version: 1
measurement: {{warmup: 0, iterations: 2, repeats: 2, timeout_s: 30, settle: false}}
switch_groups: {{g: "{group}"}}
strategies: {{s: {{mode: full, confirm: false}}}}
tolerances: {{t: {{checks: [{{metric: cos, threshold: 1.0e-4}}]}}}}
defaults: {{backend: replay, switch_group: g, strategy: s, tolerance: t}}
models: {{m: {{path: {land}, shapes: {{p: {{x: [1]}}}}}}}}
""")
    return tmp_path / "tuning.yaml"


def test_model_landscape_replays_through_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trt_routes.project import open_project
    from trt_routes.tune.apply import apply

    result = apply(open_project(replay_project(tmp_path, monkeypatch, "-a=[0|1] -b=[x|y|z]")))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    with open_project(tmp_path / "tuning.yaml").open_cache() as cache:
        trials = cache.all_trials()
    status = {t.route: t.status for t in trials}
    assert status["-b=z"] == "crashed" and status["-b=y"] == "build-error"
    # timings drawn from the file: no host load is read, so no busy-host note can apply to them
    assert all(t.meta.cpu_busy_others is None and t.meta.cpu_ticks is None for t in trials)
    assert status["-a=1 -b=z"] == "accuracy-failed" and status["-a=1"] == "ok"
    assert result.outcomes[0].selection is not None and result.outcomes[0].selection.winner == "-a=1"


def test_explain_shows_what_a_winner_s_changes_are_worth_from_the_routes_nearest_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-a=1 -c=1 wins (-c=1 helps only beside -a=1); explain, through the CLI, gives the routes one change from it,
    the costliest first: without -a=1 1.35x (exp(0.3)), without -c=1 1.10x, with -d=1 1.00x (clipped)."""
    from typer.testing import CliRunner

    from trt_routes.cli.app import app

    manifest = ["-m", str(replay_project(tmp_path, monkeypatch, "-a=[0|1] -c=[0|1] -d=[0|1]"))]
    assert CliRunner().invoke(app, ["apply", *manifest]).exit_code == 0
    out = CliRunner().invoke(app, ["explain", "m/p/cpu", *manifest], terminal_width=200).output
    head = out.index("What the winner's 2 changes are worth")
    lines = out[head:].splitlines()[1:4]
    assert [line.split(":")[0].strip() for line in lines] == ["without -a=1", "without -c=1", "with -d=1"]
    assert [round(float(line.split(": ")[1].split("x")[0]), 2) for line in lines] == [
        round(math.exp(0.3), 2), round(math.exp(0.1 - 0.004), 2), 1.0]
    assert "without -c=1, with -d=1" not in out and "without -a=1 -c=1" not in out  # as far as the default
