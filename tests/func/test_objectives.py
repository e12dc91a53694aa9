"""Objectives and constraints through apply/plan/explain/lock, in real worker processes: the replay backend
with a small landscape carrying facts (memory, engine size, energy), and real ONNX Runtime on CPU for the
facts a trial stores (p50/p90/p99, throughput, RSS delta, engine size; energy where RAPL is readable)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _project import FAST as ORT_FAST
from _project import cli, edit_manifest, make_project

from trt_routes.audit.explain import explain
from trt_routes.backends import landscape as ls
from trt_routes.backends.meters import rapl_zones
from trt_routes.backends.replay import ENV_VAR
from trt_routes.errors import ManifestError
from trt_routes.lockfile import Lockfile
from trt_routes.project import open_project
from trt_routes.tune.apply import apply, compute_plan

FAST = {"warmup": 1, "iterations": 10, "repeats": 3, "timeout_s": 60}

#: route -> (median ms, facts). -x=1: fastest but a big engine and memory-hungry; -y=1: small and frugal but
#: slower; -x=1 -y=1: slower than -x=1, bigger than -y=1, and more energy than either (dominated by both).
ROUTES: dict[str, tuple[float, dict[str, float]]] = {
    "": (1.0, {"device_memory_mb": 100.0, "engine_mb": 50.0, "energy": 5.0}),
    "-x=1": (0.6, {"device_memory_mb": 300.0, "engine_mb": 250.0, "energy": 4.0}),
    "-y=1": (0.8, {"device_memory_mb": 80.0, "engine_mb": 40.0, "energy": 2.0}),
    "-x=1 -y=1": (0.9, {"device_memory_mb": 350.0, "engine_mb": 260.0, "energy": 6.0}),
}


def landscape(path: Path, routes: dict[str, tuple[float, dict[str, float]]] = ROUTES, *, tail: str | None = None,
              with_facts: bool = True) -> Path:
    """A landscape file; ``tail``: this route gets a heavy tail (every 10th sample 5x) at the same median."""
    rng = np.random.default_rng(0)
    rows = []
    for route, (median, route_facts) in routes.items():
        samples = median * np.exp(rng.normal(0, 0.005, 200))
        if route == tail:
            samples[::10] *= 5.0
        row: dict[str, Any] = {"route": route, "status": "ok", "samples_ms": list(samples),
                               "losses": {"cos": 0.0, "lInf": 0.0}, "build_s": 0.1}
        if with_facts:
            row["facts"] = route_facts
        rows.append(row)
    data = {"schema": ls.SCHEMA, "backend": "test",
            "knobs": [{"option": "-x", "values": ["0", "1"], "default": "0"},
                      {"option": "-y", "values": ["0", "1"], "default": "0"}], "routes": rows}
    path.write_text(ls.dump(data))
    return path


def project(root: Path, land: Path, objectives: dict[str, Any] | None = None, objective: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "schema_version": 1, "measurement": FAST,
        "switch_groups": {"g": "-x=[0|1] -y=[0|1]"},
        "strategies": {"s": {"mode": "full", "confirm": False}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"backend": "replay", "switch_group": "g", "strategy": "s", "tolerance": "t"},
        "models": {"m": {"path": str(land), "shapes": {"a": {"x": [4]}}}},
    }
    if objectives is not None:
        data["objectives"] = objectives
    if objective is not None:
        data["defaults"]["objective"] = objective
    (root / "tuning.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root / "tuning.yaml"


def plan_of(manifest: Path) -> list[Any]:
    p = open_project(manifest)
    with p.open_cache() as cache:
        return compute_plan(p, cache, p.read_lock()).jobs


def lock_entry(manifest: Path) -> Any:
    return Lockfile.read(manifest.parent / "tuning.lock").jobs["m/a/cpu"]


OBJECTIVES = {"tail": {"rank": "latency.p99", "limits": {"device_memory_mb": 2048, "engine_mb": 200}},
              "small": {"rank": "engine_mb"},
              "fast": {"rank": "latency.p50"},
              "thru": {"rank": "throughput"},
              "edge": {"rank": "energy", "limits": {"latency.p99": 5.0}}}


@pytest.fixture
def land(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = landscape(tmp_path / "l.json")
    monkeypatch.setenv(ENV_VAR, str(path))
    return path


def test_without_objectives_the_median_decides_and_the_lock_records_facts(tmp_path: Path, land: Path) -> None:
    manifest = project(tmp_path / "p", land)
    assert apply(open_project(manifest)).exit_code == 0
    entry = lock_entry(manifest)
    assert entry.route == "-x=1"
    assert entry.objective is None and "objective" in entry and "facts" in entry  # written, null when absent
    assert entry.facts["engine_mb"] == 250.0 and entry.facts["device_memory_mb"] == 300.0  # the backend's own
    assert entry.facts["latency.p50"] == pytest.approx(0.6, rel=0.02)
    assert entry.facts["throughput"] == pytest.approx(4 / 0.6e-3, rel=0.02)  # batch 4: x's leading dim
    assert {"latency.p90", "latency.p99", "build_s", "energy"} <= set(entry.facts)


def test_limits_exclude_a_route_and_changing_the_objective_is_a_reselect_with_no_builds(
        tmp_path: Path, land: Path) -> None:
    manifest = project(tmp_path / "p", land, OBJECTIVES, "tail")
    first = apply(open_project(manifest))
    assert first.exit_code == 0 and first.built == 4
    entry = lock_entry(manifest)
    assert entry.route == "-y=1"  # -x=1 is faster, but its engine is over the limit
    assert entry.objective.to_data() == {"name": "tail", "rank": "latency.p99",
                                         "limits": {"device_memory_mb": 2048, "engine_mb": 200}}
    ex = explain(open_project(manifest), "m/a/cpu")
    assert ex.selection is not None
    assert ex.selection.verdict("-x=1").reason == "over the limit: engine_mb 250 > 200"  # type: ignore[union-attr]
    assert not ex.selection.verdict("-x=1").eligible  # type: ignore[union-attr]
    assert [j.action for j in plan_of(manifest)] == ["up-to-date"]

    edit_manifest(manifest, lambda d: d["defaults"].update(objective="fast"))
    (jp,) = plan_of(manifest)
    assert jp.action == "reselect" and not jp.to_build
    assert "objective changed: 'tail' (rank latency.p99; device_memory_mb <= 2048, engine_mb <= 200) -> " \
           "'fast' (rank latency.p50)" in jp.reasons[0]
    again = apply(open_project(manifest))
    assert again.exit_code == 0 and again.built == 0
    assert lock_entry(manifest).route == "-x=1" and lock_entry(manifest).objective.name == "fast"
    assert [j.action for j in plan_of(manifest)] == ["up-to-date"]


def test_throughput_ranks_higher_is_better_and_energy_lower(tmp_path: Path, land: Path) -> None:
    manifest = project(tmp_path / "p", land, OBJECTIVES, "thru")
    assert apply(open_project(manifest)).exit_code == 0
    assert lock_entry(manifest).route == "-x=1"  # the highest throughput is the lowest latency
    edit_manifest(manifest, lambda d: d["defaults"].update(objective="small"))
    assert apply(open_project(manifest)).built == 0
    assert lock_entry(manifest).route == "-y=1"
    edit_manifest(manifest, lambda d: d["defaults"].update(objective="edge"))
    assert apply(open_project(manifest)).built == 0
    assert lock_entry(manifest).route == "-y=1"  # 2 mJ
    ex = explain(open_project(manifest), "m/a/cpu")
    assert ex.selection is not None
    assert ex.selection.verdict("").reason.startswith("worse by energy: 5 mJ")  # type: ignore[union-attr]


def test_a_tail_objective_sees_the_tail_the_median_hides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = {"": (1.0, {}), "-x=1": (0.7, {}), "-y=1": (0.8, {}), "-x=1 -y=1": (0.9, {})}
    land = landscape(tmp_path / "l.json", routes, tail="-x=1", with_facts=False)
    monkeypatch.setenv(ENV_VAR, str(land))
    manifest = project(tmp_path / "p", land, OBJECTIVES, "fast")
    assert apply(open_project(manifest)).exit_code == 0
    assert lock_entry(manifest).route == "-x=1"
    edit_manifest(manifest, lambda d: d["objectives"].update(p99={"rank": "latency.p99"}))
    edit_manifest(manifest, lambda d: d["defaults"].update(objective="p99"))
    assert apply(open_project(manifest)).built == 0
    assert lock_entry(manifest).route == "-y=1"  # -x=1's p99 is 5x its median


def test_the_pareto_front_names_the_dominated_routes_and_why(tmp_path: Path, land: Path) -> None:
    manifest = project(tmp_path / "p", land, OBJECTIVES, "small")
    assert apply(open_project(manifest)).exit_code == 0
    ex = explain(open_project(manifest), "m/a/cpu")
    front = ex.front
    assert front is not None
    assert front.axes == ("engine_mb", "latency.p50", "device_memory_mb", "energy")
    assert set(front.front) == {"-x=1", "-y=1"}  # fastest; smallest, most frugal
    assert front.dominated[""] == ("-y=1", "dominated by -y=1: smaller, faster, less memory and less energy")
    assert front.dominated["-x=1 -y=1"][0] in {"-x=1", "-y=1"}
    assert front.dominated["-x=1 -y=1"][1].startswith("dominated by -")
    text = "\n".join(ex.decision)
    assert "Pareto front" in text and "dominated by" in text and "winner" in text


def test_an_objective_naming_an_unknown_fact_is_a_positioned_error(tmp_path: Path, land: Path) -> None:
    manifest = project(tmp_path / "p", land, {"tail": {"rank": "latency.p95"}}, "tail")
    with pytest.raises(ManifestError) as err:
        open_project(manifest)
    text = str(err.value)
    assert "unknown fact 'latency.p95'" in text and "did you mean 'latency.p99'?" in text
    assert "tuning.yaml:" in text


@pytest.mark.skipif(bool(rapl_zones()), reason="this host has readable RAPL counters: energy can be measured")
def test_energy_on_a_cpu_without_rapl_is_an_error_at_validate(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models)
    edit_manifest(manifest, lambda d: d.update(objectives={"edge": {"rank": "energy"}}))
    edit_manifest(manifest, lambda d: d["defaults"].update(objective="edge"))
    code, out = cli("validate", "--manifest", str(manifest))
    assert code != 0
    assert "tuning.yaml:" in out and "objective 'edge' needs energy" in out and "RAPL" in out
    assert "Traceback" not in out


def test_onnxruntime_on_cpu_stores_the_facts_of_every_trial(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    manifest = make_project(tmp_path / "p", tiny_models, group="-graph_optimization_level=[basic|all]",
                            measurement={**ORT_FAST, "iterations": 20})
    assert apply(open_project(manifest)).exit_code == 0
    with open_project(manifest).open_cache() as cache:
        trials = [t for t in cache.all_trials() if t.status == "ok"]
    assert trials
    for t in trials:
        f = t.meta.facts or {}
        assert f["latency.p50"] <= f["latency.p90"] <= f["latency.p99"] <= max(t.samples) + 1e-12
        assert f["latency.p99"] >= min(t.samples)
        batch = 4 if t.job.startswith("cnn/bs4") else 1
        assert f["batch"] == batch and f["throughput"] == pytest.approx(batch / (f["latency.p50"] / 1000))
        assert f["engine_mb"] > 0 and f["build_s"] > 0
        if "device_memory_mb" in f:  # absent where the meter missed the allocation (meters.MemoryMeter.finish)
            assert f["memory_source"] == "VmHWM - VmRSS before load" and f["device_memory_mb"] >= f["engine_mb"] / 2
        if rapl_zones():
            assert f["energy"] > 0 and f["energy_source"] == "rapl package"
        else:
            assert "energy" not in f  # absent, never zero
    entry = Lockfile.read(manifest.parent / "tuning.lock").jobs["cnn/bs4/cpu"]
    assert entry.facts["engine_mb"] > 0 and entry.objective is None


def test_trials_from_before_facts_derive_latency_and_plan_names_the_facts_they_lack(
        tmp_path: Path, land: Path) -> None:
    manifest = project(tmp_path / "p", land, OBJECTIVES, "fast")
    assert apply(open_project(manifest)).exit_code == 0
    # what an older trt-routes left: trials without stored facts (samples, median and fields only)
    p = open_project(manifest)
    with p.open_cache() as cache:
        for t in cache.all_trials():
            t.meta.facts = None
            cache.add_trial(t)
    edit_manifest(manifest, lambda d: d["objectives"].update(
        p99={"rank": "latency.p99"}, capped={"rank": "latency.p99", "limits": {"device_memory_mb": 200}}))
    edit_manifest(manifest, lambda d: d["defaults"].update(objective="p99"))
    (jp,) = plan_of(manifest)
    assert jp.action == "reselect" and "older trials lack" not in " ".join(jp.reasons)  # p99 from the samples
    assert apply(open_project(manifest)).built == 0 and lock_entry(manifest).route == "-x=1"
    assert lock_entry(manifest).facts["latency.p99"] > 0
    edit_manifest(manifest, lambda d: d["defaults"].update(objective="capped"))
    (jp,) = plan_of(manifest)
    assert jp.action == "reselect" and not jp.to_build
    assert "objective 'capped' needs facts older trials lack: device_memory_mb (4 trial(s))" in jp.reasons[0]
    result = apply(open_project(manifest))
    assert result.built == 0 and result.exit_code != 0  # no route has the fact: none is eligible, said why
    ex = explain(open_project(manifest), "m/a/cpu")
    assert ex.selection is not None and ex.selection.winner is None
    assert "not measured: device_memory_mb" in ex.selection.verdict("-x=1").reason  # type: ignore[union-attr]


def test_the_html_report_shows_the_objective_and_the_pareto_front(tmp_path: Path, land: Path) -> None:
    from trt_routes.report.html import build_report

    manifest = project(tmp_path / "p", land, OBJECTIVES, "tail")
    assert apply(open_project(manifest)).exit_code == 0
    html = build_report(open_project(manifest))
    section = html.split('<div class="pareto">', 1)[1].split("</div>", 1)[0]
    assert "objective <b>tail</b>: rank by latency.p99, device_memory_mb &le; 2048, engine_mb &le; 200" in section
    assert "<th>latency.p99 (ms)</th>" in section and "<th>engine_mb (MB)</th>" in section
    # -x=1 is over the engine limit: not eligible, so not on the front; -y=1 wins on it
    assert 'data-route="-x=1"' not in section
    assert '<tr class="winner" data-route="-y=1"><td><code>-y=1</code> <b class=mark>winner</b>' in section
    assert "dominated by -y=1: faster at p99, less memory, smaller and less energy" in section


def _tail_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, objective: str) -> Path:
    """-x=1: the best median, and a heavy tail (every 10th run 5x); -y=1: the best p99."""
    routes = {"": (1.0, {}), "-x=1": (0.7, {}), "-y=1": (0.8, {}), "-x=1 -y=1": (0.9, {})}
    land = landscape(tmp_path / "l.json", routes, tail="-x=1", with_facts=False)
    monkeypatch.setenv(ENV_VAR, str(land))
    manifest = project(tmp_path / "p", land, {**OBJECTIVES, "p99": {"rank": "latency.p99"}}, objective)
    edit_manifest(manifest, lambda d: d["strategies"]["s"].update(confirm={"slot_ms": 0}))
    return manifest


def test_a_tail_objective_is_confirmed_side_by_side_on_each_turns_p99(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _tail_project(tmp_path, monkeypatch, "p99")
    assert apply(open_project(manifest)).exit_code == 0
    entry = lock_entry(manifest)
    assert entry.route == "-y=1"
    conf = entry.selection.confirmation
    assert conf["statistic"] == "p99" and conf["turn_runs"] == 1000  # 10 runs above the quantile
    (vs,) = [r for r in conf["vs_default"]["results"] if r["route"] == "-y=1"]
    assert vs["passed"] and "p99 latency of the default" in vs["reason"]
    assert all(r["route"] != "-x=1" for r in conf["vs_default"]["results"])  # its stored p99 is the worst
    project_ = open_project(manifest)
    with project_.open_cache() as cache:
        rows = list(cache.query("select data from remeasurements"))
    assert rows and all(json.loads(r["data"])["meta"]["slot_iterations"] >= 1000 for r in rows)
    text = "\n".join(explain(project_, "m/a/cpu").decision)
    assert "p99 latency, the objective's rank, over at least 1000 runs" in text
    assert "not confirmed side by side" not in text
    assert apply(open_project(manifest)).built == 0  # the stored re-measurement decides: nothing again


def test_the_median_objective_confirms_the_route_a_tail_objective_rejects(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _tail_project(tmp_path, monkeypatch, "fast")
    assert apply(open_project(manifest)).exit_code == 0
    entry = lock_entry(manifest)
    assert entry.route == "-x=1"
    assert "statistic" not in entry.selection.confirmation  # medians: the record reads as before objectives


def test_an_objective_on_a_fact_that_is_not_timing_says_why_it_is_not_confirmed(tmp_path: Path, land: Path) -> None:
    manifest = project(tmp_path / "p", land, OBJECTIVES, "small")
    edit_manifest(manifest, lambda d: d["strategies"]["s"].update(confirm={}))
    assert apply(open_project(manifest)).exit_code == 0
    text = "\n".join(explain(open_project(manifest), "m/a/cpu").decision)
    assert "not confirmed side by side: objective 'small' ranks by engine_mb" in text
    assert "not timing noise" in text


def test_onnxruntime_confirms_a_p90_objective_on_a_hundred_runs_a_turn(
        faulty: None, tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    """Real ONNX Runtime on CPU, real sleeps (tests/fault_backend.py: the default route sleeps 4 ms a run,
    -sleep_ms=0 does not): the p90 objective's confirmation re-measures each turn over 100 runs, 10 of them
    above the quantile, and the lock records how the winner was confirmed."""
    manifest = make_project(tmp_path / "p", tiny_models, backend="faulty", group="-sleep_ms=[0]",
                            measurement={**ORT_FAST, "iterations": 20})

    def tail(d: dict[str, Any]) -> None:
        d["objectives"] = {"p90": {"rank": "latency.p90"}}
        d["defaults"]["objective"] = "p90"
        d["strategies"]["s"]["confirm"] = {"rounds": 6, "slot_ms": 0, "candidates": 1}
        d["models"] = {"cnn": {**d["models"]["cnn"], "shapes": {"bs1": d["models"]["cnn"]["shapes"]["bs1"]}}}

    edit_manifest(manifest, tail)
    assert apply(open_project(manifest)).exit_code == 0
    entry = Lockfile.read(manifest.parent / "tuning.lock").jobs["cnn/bs1/cpu"]
    assert entry.route == "-sleep_ms=0"
    conf = entry.selection.confirmation
    assert conf is not None and conf["statistic"] == "p90" and conf["turn_runs"] == 100
    (vs,) = conf["vs_default"]["results"]
    assert vs["passed"] and "p90 latency of the default" in vs["reason"]
    with open_project(manifest).open_cache() as cache:
        (row,) = [json.loads(r["data"]) for r in cache.query("select data from remeasurements")]
    assert row["meta"]["slot_iterations"] == 100
    # every slot of the default is a p90 of 100 runs of >= 4 ms sleeps
    assert all(t >= 4.0 for r, t in row["slots"] if r == "")
