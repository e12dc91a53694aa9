"""Confirmation, budgets and warm starts through apply/plan/explain, in real worker processes: the replay
backend for exact landscapes, and real ONNX Runtime for a noise-level "win" that must not win."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _project import edit_manifest, make_project

from trt_routes.audit.explain import explain
from trt_routes.backends import landscape as ls
from trt_routes.backends.replay import ENV_VAR
from trt_routes.cache import side_tables
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.tune.apply import apply, compute_plan

FAST = {"warmup": 1, "iterations": 10, "repeats": 3, "timeout_s": 60}
CONFIRM = {"rounds": 9, "iterations": 5, "slot_ms": 0}


def landscape(path: Path, medians: dict[str, float], noise: float = 0.01, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    routes = [{"route": r, "status": "ok", "samples_ms": list(m * np.exp(rng.normal(0, noise, 200))),
               "losses": {"cos": 0.0, "lInf": 0.0}, "build_s": 0.1} for r, m in medians.items()]
    data = {"schema": ls.SCHEMA, "backend": "test",
            "knobs": [{"option": "-x", "values": ["0", "1"], "default": "0"},
                      {"option": "-y", "values": ["0", "1"], "default": "0"}], "routes": routes}
    path.write_text(ls.dump(data))
    return path


def replay_project(root: Path, land: Path, mode: str = "full", **strategy: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    data = {
        "schema_version": 1, "measurement": FAST,
        "switch_groups": {"g": "-x=[0|1] -y=[0|1]"},
        "strategies": {"s": {"mode": mode, "confirm": CONFIRM, **strategy}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"backend": "replay", "switch_group": "g", "strategy": "s", "tolerance": "t"},
        "models": {"m": {"path": str(land), "shapes": {"a": {"x": [1]}, "b": {"x": [2]}}}},
    }
    (root / "tuning.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root / "tuning.yaml"


def use(monkeypatch: pytest.MonkeyPatch, manifest: Path, land: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(land))
    edit_manifest(manifest, lambda d: d["models"]["m"].update(path=str(land)))


def locked(manifest: Path) -> dict[str, str]:
    return {name: e["route"] for name, e in Lockfile.read(manifest.parent / "tuning.lock").jobs.items()}


def plan_actions(manifest: Path) -> list[str]:
    project = open_project(manifest)
    with project.open_cache() as cache:
        return [j.action for j in compute_plan(project, cache, project.read_lock()).jobs]


def remeasurements(manifest: Path) -> int:
    project = open_project(manifest)
    with project.open_cache() as cache:
        return int(cache.conn.execute("SELECT count(*) FROM remeasurements").fetchone()[0])


def test_clear_gain_confirmed_stored_and_no_churn_for_a_noise_level_challenger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = landscape(tmp_path / "v1.json", {"": 1.0, "-x=1": 0.8, "-y=1": 0.97, "-x=1 -y=1": 0.85})
    manifest = replay_project(tmp_path / "p", v1)
    use(monkeypatch, manifest, v1)
    result = apply(open_project(manifest))
    assert result.exit_code == 0, [o.error for o in result.outcomes]
    assert locked(manifest) == {"m/a/cpu": "-x=1", "m/b/cpu": "-x=1"}
    entry = Lockfile.read(manifest.parent / "tuning.lock").jobs["m/a/cpu"]
    assert entry["selection"]["confirmation"]["vs_default"]["winner"] == "-x=1"
    stored = remeasurements(manifest)
    assert stored == 2
    # apply again: nothing built, nothing re-measured, plan stays empty
    again = apply(open_project(manifest))
    assert again.built == 0 and remeasurements(manifest) == stored
    assert set(plan_actions(manifest)) == {"up-to-date"}

    # a new landscape (new signature): -x=1 -y=1 is now 1.2% faster than the locked -x=1 (noise level)
    v2 = landscape(tmp_path / "v2.json", {"": 1.0, "-x=1": 0.8, "-y=1": 0.97, "-x=1 -y=1": 0.79}, seed=1)
    use(monkeypatch, manifest, v2)
    assert set(plan_actions(manifest)) == {"tune"}
    apply(open_project(manifest))
    assert locked(manifest) == {"m/a/cpu": "-x=1", "m/b/cpu": "-x=1"}  # the locked winner stays
    ex = explain(open_project(manifest), "m/a/cpu")
    assert ex.selection is not None and "(the locked winner)" in ex.selection.summary
    assert any("Re-measured against the locked winner" in line for line in ex.decision)
    assert set(plan_actions(manifest)) == {"up-to-date"}

    # a clear gain (12%) replaces it
    v3 = landscape(tmp_path / "v3.json", {"": 1.0, "-x=1": 0.8, "-y=1": 0.97, "-x=1 -y=1": 0.70}, seed=2)
    use(monkeypatch, manifest, v3)
    apply(open_project(manifest))
    assert locked(manifest) == {"m/a/cpu": "-x=1 -y=1", "m/b/cpu": "-x=1 -y=1"}


def test_missing_remeasurement_shows_in_plan_and_apply_measures_only_that(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(A static strategy's lock stands on its own record of the decision; an adaptive one re-derives.)"""
    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.8, "-y=1": 0.97, "-x=1 -y=1": 0.85})
    manifest = replay_project(tmp_path / "p", land, mode="adaptive")
    use(monkeypatch, manifest, land)
    apply(open_project(manifest))
    assert locked(manifest) == {"m/a/cpu": "-x=1", "m/b/cpu": "-x=1"}
    project = open_project(manifest)
    with project.open_cache() as cache, cache.conn:
        cache.conn.execute("DELETE FROM remeasurements")
    project = open_project(manifest)
    with project.open_cache() as cache:
        plan = compute_plan(project, cache, project.read_lock())
    assert [j.action for j in plan.jobs] == ["reselect", "reselect"]
    assert "confirm side by side (measurements, no builds)" in plan.jobs[0].reasons[0]
    result = apply(open_project(manifest))
    assert result.built == 0 and remeasurements(manifest) == 2
    assert set(plan_actions(manifest)) == {"up-to-date"}
    # a new margin re-decides from the stored re-measurements: no measurement, the lock follows
    edit_manifest(manifest, lambda d: d["strategies"]["s"]["confirm"].update(margin=0.5))
    assert set(plan_actions(manifest)) == {"reselect"}
    apply(open_project(manifest))
    assert remeasurements(manifest) == 2 and locked(manifest) == {"m/a/cpu": "", "m/b/cpu": ""}


def test_budget_stops_the_search_for_good_and_a_raised_budget_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.8, "-y=1": 0.9, "-x=1 -y=1": 0.7})
    manifest = replay_project(tmp_path / "p", land, mode="full", max_builds=2)
    edit_manifest(manifest, lambda d: d["models"]["m"].update(shapes={"a": {"x": [1]}}))
    use(monkeypatch, manifest, land)
    assert apply(open_project(manifest)).built == 2
    assert plan_actions(manifest) == ["up-to-date"]  # stopped at its budget: not "tune" forever
    project = open_project(manifest)
    with project.open_cache() as cache:
        (row,) = cache.query("SELECT state, builds FROM searches")
    assert row == {"state": "budget", "builds": 2}
    edit_manifest(manifest, lambda d: d["strategies"]["s"].update(max_builds=3))
    assert plan_actions(manifest) == ["tune"]
    assert apply(open_project(manifest)).built == 1
    assert plan_actions(manifest) == ["up-to-date"]


def test_adaptive_warm_starts_from_a_related_jobs_winner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 1.0, "-y=1": 1.01, "-x=1 -y=1": 0.7})
    manifest = replay_project(tmp_path / "p", land, mode="adaptive")
    use(monkeypatch, manifest, land)
    # shape a alone: screening finds no positive knob, so the interaction stays hidden
    edit_manifest(manifest, lambda d: d["models"]["m"].update(shapes={"a": {"x": [1]}}))
    apply(open_project(manifest))
    assert locked(manifest) == {"m/a/cpu": ""}
    # lock a winner for a related job by hand-over: tune shape b warm-started from a locked -x=1 -y=1
    project = open_project(manifest)
    with project.open_cache() as cache:
        cache.add_decision("m/c/cpu", "-x=1 -y=1", None, "imported", "")
    edit_manifest(manifest, lambda d: d["models"]["m"].update(shapes={"a": {"x": [1]}, "b": {"x": [2]}}))
    from trt_routes import api

    planned = {jp.job.name: jp for jp in api.plan(open_project(manifest)).jobs}
    assert "starts from related jobs' winners: -x=1 -y=1 (won for m/c/cpu)" in planned["m/b/cpu"].reasons
    apply(open_project(manifest))
    assert locked(manifest)["m/b/cpu"] == "-x=1 -y=1"
    decision = "\n".join(explain(open_project(manifest), "m/b/cpu").decision)
    assert "Warm start (priors): the search began with related jobs' winners: -x=1 -y=1 (won for " in decision
    project = open_project(manifest)
    with project.open_cache() as cache:
        warm = {r["job"]: json.loads(r["warm"]) for r in cache.query("SELECT job, warm FROM searches")}
    assert warm["m/b/cpu"] == ["-x=1 -y=1"] and warm["m/a/cpu"] == []
    assert set(plan_actions(manifest)) == {"up-to-date"}  # warm starts are frozen per job group


def test_noise_level_win_does_not_replace_the_default_with_real_onnxruntime(
        tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """Knobs that cannot change anything for a CNN (no GELU to fuse): every route builds the same engine,
    so any measured gain is noise. Confirmation keeps the default and explain says why."""
    group = "-disable:GeluFusion=[off|on] -disable:BiasGeluFusion=[off|on] -disable:QuickGeluFusion=[off|on]"
    # Which routes look faster than the default in the search is itself noise (0 to 3 of them); only those
    # are challengers. Repeat the whole scenario until at least one challenger reaches confirmation
    # (each attempt has ~3/4 chance), so the test always exercises the side-by-side re-measurement.
    for attempt in range(6):
        manifest = make_project(tmp_path / f"p{attempt}", tiny_models, group=group, mode="fast",
                                measurement={"warmup": 2, "iterations": 5, "repeats": 3, "timeout_s": 60})
        edit_manifest(manifest, lambda d: d["strategies"]["s"].update(
            confirm={"rounds": 12, "iterations": 5, "margin": 0.05, "confidence": 0.99, "slot_ms": 5}))
        edit_manifest(manifest, lambda d: d["models"]["cnn"].update(shapes={"bs1": {"input": [1, 3, 32, 32]}}))
        result = apply(open_project(manifest))
        assert result.exit_code == 0, [o.error for o in result.outcomes]
        (outcome,) = result.outcomes
        assert outcome.selection is not None and outcome.selection.winner == ""
        data = outcome.selection.confirmation or {}
        challengers = len((data.get("vs_default") or {}).get("results") or [])
        if challengers:
            break
    assert 1 <= challengers <= 3, "no route ever looked faster than the default in six searches"
    assert outcome.selection.summary.startswith("default route kept")
    assert not any(r["passed"] for r in data["vs_default"]["results"])
    ex = explain(open_project(manifest), "cnn/bs1/cpu")
    assert any(line.startswith("Re-measured against the default route") for line in ex.decision)
    assert ex.decision[0].startswith("default route kept: the best challenger side by side")
    project = open_project(manifest)
    with project.open_cache() as cache:
        (row,) = side_tables.remeasurements_for(cache, project.jobs[0].group_key)
    # sequential design (issue 20): each challenger stops once decided, so at most the fixed 12 rounds each,
    # and every challenger's slots are exactly the rounds its verdict used
    assert row["baseline"] == "" and len(row["slots"]) <= 1 + 2 * challengers * 12
    for r in data["vs_default"]["results"]:
        assert sum(1 for route, _ in row["slots"] if route == r["route"]) == r["rounds"]
    assert set(plan_actions(manifest)) == {"up-to-date"}
    shutil.rmtree(manifest.parent / "engines")  # materialize only: no re-measurement
    again = apply(open_project(manifest))
    assert again.built == 0 and [o.action for o in again.outcomes] == ["materialize"]


def test_turns_are_sized_by_the_noise_within_the_baseline_trials_repeats(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recording at five levels (1.0 to 1.4 ms, 40 runs each), quiet within each: a trial's repeats land on
    different levels, so its samples spread ~10% around their median, but each repeat is quiet. Turns are
    sized by the latter (the iterations floor, 5 runs), not the former (the 20 ms cap, ~16 runs)."""
    rng = np.random.default_rng(1)
    quiet = [(1.0 + 0.1 * (i // 40)) * (1 + 0.001 * rng.standard_normal()) for i in range(200)]
    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.5, "-y=1": 1.0, "-x=1 -y=1": 0.5})
    data = json.loads(land.read_text())
    data["routes"][0]["samples_ms"] = quiet
    land.write_text(json.dumps(data))
    manifest = replay_project(tmp_path / "p", land)
    use(monkeypatch, manifest, land)
    assert apply(open_project(manifest)).exit_code == 0
    project = open_project(manifest)
    with project.open_cache() as cache:
        rows = [r for job in project.jobs for r in side_tables.remeasurements_for(cache, job.group_key)]
    assert rows and all(r["meta"]["slot_iterations"] == CONFIRM["iterations"] for r in rows), \
        [r["meta"]["slot_iterations"] for r in rows]


def test_re_measurements_of_the_earlier_layout_are_read_not_measured_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache written before baseline turns were shared (design "sequential-1": B C1 B C2 B ..., keyed by
    that design) plans up to date and applies without a re-measurement: its ratios mean what the current
    layout's mean, so upgrading trt-routes re-measures nothing."""
    from trt_routes.manifest.schema import Confirm
    from trt_routes.selection.confirm import Remeasurement, remeasure_key

    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.8, "-y=1": 0.97, "-x=1 -y=1": 0.85})
    manifest = replay_project(tmp_path / "p", land, mode="adaptive")
    use(monkeypatch, manifest, land)
    assert apply(open_project(manifest)).exit_code == 0
    before = locked(manifest)
    settings = Confirm(**CONFIRM)
    project = open_project(manifest)
    with project.open_cache() as cache, cache.conn:
        rows = list(cache.conn.execute("SELECT key, group_key, data FROM remeasurements"))
        assert rows
        for key, group, data in rows:
            m = Remeasurement.from_json(json.loads(data))
            assert key == remeasure_key(group, m.baseline, m.challengers, settings)
            slots: list[tuple[str, float]] = []  # the earlier layout, the same ratios in the same order
            for c in m.challengers:
                for r in m.paired_ratios(c):
                    slots += [(m.baseline, 1.0), (c, r)]
            old = Remeasurement(m.baseline, m.challengers, ((m.baseline, 1.0), *slots[1:]) if slots else (), m.meta)
            for c in m.challengers:
                assert old.paired_ratios(c) == pytest.approx(m.paired_ratios(c))
            cache.conn.execute("UPDATE remeasurements SET key = ?, data = ? WHERE key = ?",
                             [remeasure_key(group, m.baseline, m.challengers, settings, design="sequential-1"),
                              json.dumps(old.to_json()), key])
    assert set(plan_actions(manifest)) == {"up-to-date"}
    again = apply(open_project(manifest))
    assert again.built == 0 and remeasurements(manifest) == len(rows) and locked(manifest) == before


def test_re_measurements_of_the_earlier_turn_sizing_are_read_not_measured_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache whose re-measurements were keyed by the earlier turn sizing ("mad-1": turns of twice the runs,
    so more precise ratios) plans up to date and applies without a re-measurement; a fresh one is keyed by
    the current sizing, whose turns are sized for margin / sqrt 2 (a quarter of the runs of margin / (2 sqrt 2)
    where the noise, not the floor or the cap, sets a turn's length)."""
    from trt_routes.manifest.schema import Confirm
    from trt_routes.selection.confirm import SIZING, remeasure_key
    from trt_routes.selection.sequential import turn_target

    settings = Confirm(**CONFIRM)
    assert SIZING == "mad-2" and turn_target(settings) == pytest.approx(max(settings.margin, 0.01) / 2 ** 0.5)
    land = landscape(tmp_path / "l.json", {"": 1.0, "-x=1": 0.8, "-y=1": 0.97, "-x=1 -y=1": 0.85})
    manifest = replay_project(tmp_path / "p", land, mode="adaptive")
    use(monkeypatch, manifest, land)
    assert apply(open_project(manifest)).exit_code == 0
    before = locked(manifest)
    project = open_project(manifest)
    with project.open_cache() as cache, cache.conn:
        rows = list(cache.conn.execute("SELECT key, group_key, baseline, challengers FROM remeasurements"))
        assert rows
        for key, group, baseline, challengers in rows:
            assert key == remeasure_key(group, baseline, json.loads(challengers), settings)
            old = remeasure_key(group, baseline, json.loads(challengers), settings, sizing="mad-1")
            assert old != key
            cache.conn.execute("UPDATE remeasurements SET key = ? WHERE key = ?", [old, key])
    assert set(plan_actions(manifest)) == {"up-to-date"}
    again = apply(open_project(manifest))
    assert again.built == 0 and remeasurements(manifest) == len(rows) and locked(manifest) == before
