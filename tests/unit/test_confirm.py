"""Confirmation decisions (trt_routes.selection.confirm): paired ratios, margin and noise, Bonferroni, no churn."""

from __future__ import annotations

import numpy as np
import pytest

from trt_routes.cache.store import TrialRecord
from trt_routes.manifest.schema import Check, Confirm, Tolerance
from trt_routes.selection.confirm import Remeasurement, Request, challengers, decide, remeasure_key, resolve, schedule
from trt_routes.selection.rank import select

TOL = Tolerance(checks=[Check(metric="cos", threshold=1e-4)])
SETTINGS = Confirm(candidates=2, margin=0.02, rounds=12)


def trial(route: str, median: float, cos: float = 0.0) -> TrialRecord:
    return TrialRecord(id=f"id{route}", group_key="g", job="m/s/cpu", route=route, signature="s",
                       model_digest="m", shape_key="x", settings_key="y", protocol_key="p", reference_key="r",
                       backend="b", status="ok", median_ms=median, ci_low=median * 0.99, ci_high=median * 1.01,
                       losses={"y": {"cos": cos}})


def measured(baseline: str, times: dict[str, float], rounds: int = 12, noise: float = 0.0, seed: int = 0,
             drift: float = 0.0) -> Remeasurement:
    """Slots in ``schedule`` order: each route's true time, times a drift factor, times lognormal noise."""
    rng = np.random.default_rng(seed)
    challengers = tuple(r for r in times if r != baseline)
    order = schedule(baseline, challengers, rounds)
    slots = tuple((r, times[r] * (1 + drift * i) * float(np.exp(rng.normal(0, noise))))
                  for i, r in enumerate(order))
    return Remeasurement(baseline, challengers, slots)


def test_schedule_interleaves_the_baseline_between_every_challenger_slot() -> None:
    assert schedule("", ("b",), 3) == ["", "b", "", "b", "", "b", ""]
    assert schedule("", ("b", "c"), 2) == ["", "b", "", "c", "", "c", "", "b", ""]


def test_a_clear_gain_is_confirmed_and_the_best_confirmed_challenger_wins() -> None:
    d = decide(measured("", {"": 1.0, "-a=1": 0.8, "-b=1": 0.7}, noise=0.01), SETTINGS)
    assert d.winner == "-b=1"
    r = d.result("-a=1")
    assert r is not None and r.passed and r.ratio == pytest.approx(0.8, rel=0.02)
    assert r.ci_high is not None and r.ci_high < 1.0 and r.reason.startswith("confirmed: ")


def test_a_noise_level_gain_is_not_confirmed() -> None:
    """A/A: the same true time under 15% noise; a false confirmation stays rare (alpha 5%, one-sided)."""
    wins = [decide(measured("", {"": 1.0, "-a=1": 1.0}, noise=0.15, seed=s), SETTINGS).winner for s in range(100)]
    assert wins.count("-a=1") <= 4
    reasons = [decide(measured("", {"": 1.0, "-a=1": 0.95}, noise=0.15, seed=s), SETTINGS).results[0].reason
               for s in range(10)]
    assert any("within the noise" in r for r in reasons)


def test_a_real_gain_below_the_margin_is_not_enough() -> None:
    d = decide(measured("", {"": 1.0, "-a=1": 0.985}, noise=0.001), SETTINGS)
    assert d.winner == "" and "not above the margin 2.0%" in d.results[0].reason
    d = decide(measured("", {"": 1.0, "-a=1": 0.985}, noise=0.001), Confirm(margin=0.01))
    assert d.winner == "-a=1"


def test_pairing_cancels_drift() -> None:
    """The machine slows down 2% per slot: unpaired medians would blur, paired ratios stay exact."""
    m = measured("", {"": 1.0, "-a=1": 0.9}, drift=0.02)
    assert np.median(m.paired_ratios("-a=1")) == pytest.approx(0.9, rel=0.02)
    assert decide(m, SETTINGS).winner == "-a=1"


def test_more_challengers_widen_each_interval() -> None:
    m1 = measured("", {"": 1.0, "-a=1": 0.95}, noise=0.05, seed=3)
    both = Remeasurement(m1.baseline, ("-a=1", "-b=1"), m1.slots)  # same slots, Bonferroni over two
    one, two = decide(m1, SETTINGS).results[0], decide(both, SETTINGS).results[0]
    assert one.ci_low is not None and two.ci_low is not None and one.ci_high is not None and two.ci_high is not None
    assert two.ci_high - two.ci_low >= one.ci_high - one.ci_low


def test_too_few_rounds_never_confirm() -> None:
    d = decide(Remeasurement("", ("-a=1",), (("", 1.0), ("-a=1", 0.5))), SETTINGS)
    assert d.winner == "" and "too few" in d.results[0].reason


def test_round_trip_and_key() -> None:
    m = measured("", {"": 1.0, "-a=1": 0.9}, rounds=3)
    assert Remeasurement.from_json(m.to_json()) == m
    k = remeasure_key("g", "", ["-b=1", "-a=1"], SETTINGS)
    assert k == remeasure_key("g", "", ["-a=1", "-b=1"], Confirm(candidates=2, margin=0.5, confidence=0.9, rounds=12))
    assert k != remeasure_key("g", "", ["-a=1", "-b=1"], Confirm(rounds=13))


# -- resolve: the final selection -----------------------------------------------------------------


def store_of(items: dict[tuple[str, tuple[str, ...]], Remeasurement]):  # type: ignore[no-untyped-def]
    return lambda baseline, chal: items.get((baseline, tuple(chal)))


TRIALS = {t.route: t for t in [trial("", 1.0), trial("-a=1", 0.9), trial("-b=1", 0.95), trial("-c=1", 0.5, cos=1.0)]}


def test_resolve_asks_for_the_missing_remeasurement_then_decides() -> None:
    sel = select(TRIALS, list(TRIALS), TOL)
    assert sel.winner == "-a=1"
    out, requests = resolve(sel, SETTINGS, None, store_of({}))
    assert requests == [Request("", ("-a=1", "-b=1"))] and out.winner == "-a=1"
    noisy = measured("", {"": 1.0, "-a=1": 0.99, "-b=1": 1.0}, noise=0.05)
    out, requests = resolve(sel, SETTINGS, None, store_of({("", ("-a=1", "-b=1")): noisy}))
    assert not requests and out.winner == ""
    assert out.summary.startswith("default route kept: the best challenger")
    assert "not confirmed" in out.verdict("-a=1").reason  # type: ignore[union-attr]
    assert out.confirmation is not None and out.confirmation["raw_winner"] == "-a=1"
    assert "beat the default route re-measured side by side" in out.rule
    clear = measured("", {"": 1.0, "-a=1": 0.9, "-b=1": 0.95}, noise=0.01)
    out, _ = resolve(sel, SETTINGS, None, store_of({("", ("-a=1", "-b=1")): clear}))
    assert out.winner == "-a=1" and out.summary.startswith("-a=1 chosen: confirmed")
    assert out.chosen_ms == 0.9 and out.default_ms == 1.0


def test_no_churn_a_locked_winner_stays_unless_beaten_side_by_side() -> None:
    sel = select(TRIALS, list(TRIALS), TOL)
    vs_default = measured("", {"": 1.0, "-a=1": 0.9, "-b=1": 0.95}, noise=0.01)
    items = {("", ("-a=1", "-b=1")): vs_default}
    out, requests = resolve(sel, SETTINGS, "-b=1", store_of(items))
    assert requests == [Request("-b=1", ("-a=1",))]
    items[("-b=1", ("-a=1",))] = measured("-b=1", {"-b=1": 0.95, "-a=1": 0.94}, noise=0.03)
    out, requests = resolve(sel, SETTINGS, "-b=1", store_of(items))
    assert not requests and out.winner == "-b=1" and "(the locked winner)" in out.summary
    items[("-b=1", ("-a=1",))] = measured("-b=1", {"-b=1": 0.95, "-a=1": 0.85}, noise=0.01)
    out, _ = resolve(sel, SETTINGS, "-b=1", store_of(items))
    assert out.winner == "-a=1"
    # a locked winner that is no longer eligible, or the default, needs no second re-measurement
    assert resolve(sel, SETTINGS, "-c=1", store_of(items))[0].winner == "-a=1"
    assert resolve(sel, SETTINGS, "", store_of(items))[0].winner == "-a=1"


def test_confirmation_off_or_default_not_eligible_keeps_the_raw_selection() -> None:
    sel = select(TRIALS, list(TRIALS), TOL)
    assert resolve(sel, None, None, store_of({})) == (sel, [])
    broken = {**TRIALS, "": trial("", 1.0, cos=1.0)}
    sel = select(broken, list(broken), TOL)
    out, requests = resolve(sel, SETTINGS, None, store_of({}))
    assert not requests and out.winner == "-a=1" and "not eligible" in (out.confirmation or {})["note"]


def test_only_routes_that_could_beat_the_baseline_are_challengers() -> None:
    slow = TrialRecord(**{**trial("-s=1", 1.5).__dict__, "ci_low": 1.4, "ci_high": 1.6})
    noisy = TrialRecord(**{**trial("-n=1", 1.3).__dict__, "ci_low": 0.9, "ci_high": 1.7})
    trials = {t.route: t for t in [trial("", 1.0), slow, noisy, trial("-a=1", 0.9)]}
    sel = select(trials, list(trials), TOL)
    assert challengers(sel, 3) == ("-a=1", "-n=1")  # -s=1's interval starts above the default's
    assert challengers(sel, 1) == ("-a=1",)
