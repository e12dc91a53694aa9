"""The pure parts of objectives: facts derived from samples, the Pareto front, selection under an
objective (limits, rank direction, ties), the manifest block, landscape facts and the energy meter's
RAPL arithmetic (on real files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from trt_routes.backends import landscape as ls
from trt_routes.backends import meters
from trt_routes.cache.store import TrialRecord
from trt_routes.evidence import facts
from trt_routes.evidence.meta import TrialMeta
from trt_routes.manifest.schema import Objective, Tolerance
from trt_routes.selection.rank import front_axes, pareto_front, select

TOL = Tolerance.model_validate({"checks": [{"metric": "cos", "threshold": 1e-3}]})


def trial(route: str, median: float, stored: dict[str, float] | None = None, cos: float = 0.0,
          samples: list[float] | None = None) -> TrialRecord:
    return TrialRecord(id=route or "default", group_key="g", job="j", route=route, signature="s",
                       model_digest="m", shape_key="k", settings_key="k", protocol_key="k", reference_key="k",
                       backend="replay", status="ok", median_ms=median, samples=samples or [median] * 5,
                       losses={"y": {"cos": cos}}, build_s=1.0, meta=TrialMeta(facts=stored or {}))


def test_derived_facts_come_from_samples_and_fields_and_absent_ones_stay_absent() -> None:
    samples = [float(i) for i in range(1, 101)]
    got = facts.derived(None, samples, 50.5, 2.0, batch=8)
    assert got["latency.p50"] == pytest.approx(50.5) and got["latency.p99"] == pytest.approx(99.01)
    assert got["latency.p90"] == pytest.approx(90.1)
    assert got["throughput"] == pytest.approx(8 / 0.0505) and got["build_s"] == 2.0
    assert "energy" not in got and "device_memory_mb" not in got and "engine_mb" not in got
    # no samples read (plan's light rows): p50 is the stored median, quantiles are absent
    light = facts.derived({"energy": 1.5, "bogus": 3, "engine_mb": float("nan")}, [], 2.0, None)
    assert light == {"energy": 1.5, "latency.p50": 2.0}


def test_batch_is_the_leading_dim_of_the_first_input_by_name() -> None:
    assert facts.batch_of({"b": {"shape": [3, 9]}, "a": {"shape": [16, 3]}}) == 16
    assert facts.batch_of({"a": {"shape": []}}) == 1 and facts.batch_of({}) == 1


def test_pareto_front_and_reasons() -> None:
    points = {"": {"latency.p50": 1.0, "engine_mb": 50.0}, "-a=1": {"latency.p50": 0.5, "engine_mb": 60.0},
              "-b=1": {"latency.p50": 0.9, "engine_mb": 40.0}, "-c=1": {"latency.p50": 1.2, "engine_mb": 70.0},
              "-d=1": {"latency.p50": 0.5, "engine_mb": 65.0}}
    front = facts.pareto(points, ["latency.p50", "engine_mb", "energy"])
    assert front.axes == ("latency.p50", "engine_mb")  # energy: no point has it
    assert set(front.front) == {"-a=1", "-b=1"}
    assert front.dominated["-c=1"] == ("-a=1", "dominated by -a=1: faster and smaller")
    assert front.dominated[""] == ("-b=1", "dominated by -b=1: faster and smaller")
    assert front.dominated["-d=1"] == ("-a=1", "dominated by -a=1: smaller")  # equal latency, larger
    # throughput is higher-is-better on a front too
    up = facts.pareto({"x": {"throughput": 10.0}, "y": {"throughput": 20.0}}, ["throughput"])
    assert up.front == ("y",) and up.dominated["x"][1] == "dominated by y: higher throughput"


def test_without_an_objective_selection_is_the_median_rule_with_facts_attached() -> None:
    trials = {"": trial("", 1.0), "-a=1": trial("-a=1", 0.5, {"engine_mb": 300.0})}
    sel = select(trials, ["-a=1"], TOL)
    assert sel.winner == "-a=1" and sel.objective is None
    assert sel.verdict("-a=1").reason.startswith("winner: fastest eligible route, 0.5 ms")  # type: ignore[union-attr]
    assert sel.verdict("-a=1").facts["engine_mb"] == 300.0  # type: ignore[union-attr]


def test_limits_filter_and_the_rank_orders_with_direction_and_ties() -> None:
    trials = {"": trial("", 1.0, {"engine_mb": 50.0}), "-a=1": trial("-a=1", 0.5, {"engine_mb": 250.0}),
              "-b=1": trial("-b=1", 0.8, {"engine_mb": 40.0}), "-c=1": trial("-c=1", 0.4, cos=0.1),
              "-d=1": trial("-d=1", 0.7)}
    capped = Objective(rank="latency.p50", limits={"engine_mb": 200})
    sel = select(trials, list(trials), TOL, objective=capped, objective_name="cap")
    assert sel.winner == "-b=1"
    assert sel.verdict("-a=1").reason == "over the limit: engine_mb 250 > 200"  # type: ignore[union-attr]
    assert sel.verdict("-c=1").reason.startswith("failed accuracy gate")  # type: ignore[union-attr]  # gate first
    assert sel.verdict("-d=1").reason.startswith("not measured: engine_mb")  # type: ignore[union-attr]
    assert "every limit of objective 'cap' met" in sel.rule
    thru = select(trials, list(trials), TOL, objective=Objective(rank="throughput"), batch=4)
    assert thru.winner == "-a=1"  # the highest throughput (the accuracy gate still excludes -c=1)
    assert thru.verdict("-a=1").facts["throughput"] == pytest.approx(4 / 0.5e-3)  # type: ignore[union-attr]
    assert "worse by throughput" in thru.verdict("-b=1").reason  # type: ignore[union-attr]
    tied = {"": trial("", 1.0, {"engine_mb": 10.0}), "-a=1": trial("-a=1", 0.5, {"engine_mb": 10.0})}
    small = select(tied, ["-a=1"], TOL, objective=Objective(rank="engine_mb"))
    assert small.winner == "" and "tie-break prefers the default route" in small.verdict("-a=1").reason  # type: ignore[union-attr]
    none = select(trials, list(trials), TOL, objective=Objective(limits={"engine_mb": 1}), objective_name="tiny")
    assert none.winner is None and "passed the accuracy gate but not objective 'tiny'" in none.summary


def test_the_front_uses_the_objectives_latency_and_its_limited_facts() -> None:
    assert front_axes(None) == ("latency.p50", "device_memory_mb", "engine_mb", "energy")
    assert front_axes(Objective(rank="latency.p99", limits={"build_s": 5})) == (
        "latency.p99", "device_memory_mb", "engine_mb", "energy", "build_s")
    trials = {"": trial("", 1.0, {"engine_mb": 5.0}), "-a=1": trial("-a=1", 0.5, {"engine_mb": 9.0}),
              "-b=1": trial("-b=1", 0.6, {"engine_mb": 9.5})}
    front = pareto_front(select(trials, list(trials), TOL), None)
    assert set(front.front) == {"", "-a=1"} and front.dominated["-b=1"][0] == "-a=1"


def test_the_objectives_block_is_strict() -> None:
    assert Objective.model_validate({"rank": "throughput", "limits": {"engine_mb": 200}}).facts == (
        "throughput", "engine_mb")
    for bad, needle in (({"rank": "latency.p95"}, "did you mean 'latency.p99'"),
                        ({"limits": {"engine_mbb": 1}}, "did you mean 'engine_mb'"),
                        ({"limits": {"engine_mb": True}}, "not true/false"),
                        ({"limits": {"engine_mb": float("inf")}}, "finite"), ({"rnak": "energy"}, "rnak")):
        with pytest.raises(ValidationError) as err:
            Objective.model_validate(bad)
        assert needle.lower() in str(err.value).lower(), (bad, str(err.value))


def test_landscape_facts_are_checked_and_leave_older_digests_alone() -> None:
    base = {"schema": ls.SCHEMA, "backend": "t", "knobs": [{"option": "-x", "values": ["0", "1"], "default": "0"}],
            "routes": [{"route": "", "samples_ms": [1.0]}]}
    plain = ls.validate(base)
    assert "facts" not in plain.to_json()["routes"][0]
    with_facts = ls.validate({**base, "routes": [{"route": "", "samples_ms": [1.0], "facts": {"energy": 2.0}}]})
    assert with_facts.digest != plain.digest and with_facts.routes[""].facts == {"energy": 2.0}
    with pytest.raises(Exception, match="unknown fact 'energyy'"):
        ls.validate({**base, "routes": [{"route": "", "samples_ms": [1.0], "facts": {"energyy": 2.0}}]})


def test_the_rapl_meter_sums_packages_and_handles_a_wrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("intel-rapl:0", 1_000_000), ("intel-rapl:1", 999_000_000), ("intel-rapl:0:0", 5)):
        zone = tmp_path / name
        zone.mkdir()
        (zone / "energy_uj").write_text(str(value))
        (zone / "max_energy_range_uj").write_text("1000000000")
    monkeypatch.setattr(meters, "RAPL_GLOB", str(tmp_path / "intel-rapl:[0-9]*"))
    assert [z.name for z in meters.rapl_zones()] == ["intel-rapl:0", "intel-rapl:1"]  # sub-zones left out
    assert meters.energy_readable({"kind": "cpu"}) is None
    meter = meters.EnergyMeter({"kind": "cpu"})
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("3000000")  # +2 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("1000000")  # wrapped: +2 J
    got = meter.finish(inferences=400)
    assert got == {"energy": pytest.approx(4000.0 / 400), "energy_source": "rapl package"}  # mJ per inference
    assert meters.EnergyMeter({"kind": "cpu"}).finish(400) == {}  # the counters did not move: absent, not 0
    monkeypatch.setattr(meters, "RAPL_GLOB", str(tmp_path / "none-[0-9]*"))
    assert "RAPL" in (meters.energy_readable({"kind": "cpu"}) or "")
    assert meters.unmeasurable(("energy",), {"kind": "cpu"}, frozenset({"energy"})) is None  # the backend reports it


def test_latency_quantiles_are_numpys_to_the_last_bit_without_numpy() -> None:
    """latency.p50/p90/p99 are numpy.quantile's default (linear) quantiles, bit for bit, on samples of every
    size and shape (ties, one sample, wide ranges); computed without numpy, whose quantile imports numpy.ma
    (~20 ms) on its first call, on apply's path to the first job's selection."""
    import subprocess
    import sys

    import numpy as np

    from trt_routes.evidence.facts import latency_facts

    rng = np.random.default_rng(7)
    for trial in range(3000):
        n = int(rng.integers(1, 300))
        x = [rng.lognormal(0, 1, n), rng.integers(0, 4, n).astype(float),
             rng.random(n) * 10.0 ** int(rng.integers(-6, 6)), np.round(rng.random(n), 2)][trial % 4]
        assert list(latency_facts(list(x)).values()) == [float(v) for v in np.quantile(x, [0.5, 0.9, 0.99])]
    assert latency_facts([]) == {}
    code = ("import sys\nfrom trt_routes.evidence.facts import latency_facts\nlatency_facts([3.0, 1.0, 2.0])\n"
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_explain_names_the_first_dominated_routes_and_counts_the_rest() -> None:
    """A search at scale leaves hundreds of dominated routes: explain's decision names the first ten and counts
    the rest (each is in explain --json); a small search's are all named."""
    from trt_routes.selection.rank import DOMINATED_SHOWN, front_lines

    many = {t.route: t for t in [trial("", 2.0), *(trial(f"-k{i:02d}=1", 1.0 + i / 100) for i in range(25))]}
    sel = select(many, list(many), TOL)
    lines = front_lines(sel, None)
    named = [line for line in lines if ": dominated by " in line]
    assert len(named) == DOMINATED_SHOWN and lines[-1].startswith(f"  ... and {25 - DOMINATED_SHOWN} more dominated")
    few = {t.route: t for t in [trial("", 2.0), trial("-a=1", 1.0), trial("-b=1", 1.5)]}
    assert [line for line in front_lines(select(few, list(few), TOL), None) if ": dominated by " in line] == [
        "  default: dominated by -a=1: faster", "  -b=1: dominated by -a=1: faster"]
