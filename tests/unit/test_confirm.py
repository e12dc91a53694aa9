"""Confirmation decisions (trt_routes.selection.confirm): paired ratios, margin and noise, Bonferroni, no churn."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from trt_routes.cache.store import TrialRecord
from trt_routes.manifest.schema import Check, Confirm, Tolerance
from trt_routes.selection.confirm import Remeasurement, Request, challengers, decide, remeasure_key, resolve
from trt_routes.selection.rank import select
from trt_routes.selection.sequential import schedule

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
    # rounds as measured: a sequential record shorter than its planned rounds and undecided confirms nothing
    d = decide(measured("", {"": 1.0, "-a=1": 0.985}, noise=0.001), Confirm(margin=0.01, rounds=12))
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
    # sequential design (issue 20): a record measured for one rule because another's did not decide is keyed by it
    rule = remeasure_key("g", "", ["-a=1", "-b=1"], SETTINGS, rule=True)
    assert rule != k and rule != remeasure_key("g", "", ["-a=1", "-b=1"], Confirm(candidates=2, margin=0.5,
                                                                                 rounds=12), rule=True)
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
    assert out.summary.startswith("default route kept: the best challenger side by side")
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


# -- the sequential design (issue 20) --------------------------------------------------------------

def test_sequential_final_look_keeps_the_fixed_designs_boundary() -> None:
    """The last look uses the order statistic the fixed interval used; interim looks spend only the rest."""
    from trt_routes.selection.sequential import ERROR_CAP, Stopping, median_interval

    for rounds, k, confidence in ((15, 3, 0.95), (15, 1, 0.95), (12, 2, 0.99), (9, 1, 0.9)):
        s = Stopping(0.02, confidence, rounds, k)
        ratios = list(np.linspace(0.9, 1.1, rounds))
        _, _, high = median_interval(ratios, 1.0 - (1.0 - confidence) / k)
        kf = s.boundaries[rounds]
        assert sorted(ratios)[rounds - kf] == high  # x_(n+1-k), the fixed interval's upper end
        spent = sum(sum(math.comb(n, i) for i in range(kn)) / 2.0**n for n, kn in s.boundaries.items())
        final = sum(math.comb(rounds, i) for i in range(kf)) / 2.0**rounds
        assert spent <= max(final, ERROR_CAP * (1.0 - confidence) / 2.0 / k) + 1e-12  # union bound over looks


def test_sequential_false_pass_rate_on_aa_is_below_its_level() -> None:
    from trt_routes.selection.sequential import Stopping

    rng = np.random.default_rng(7)
    s = Stopping(0.0, 0.95, 15, 1)  # no margin: the hardest case for the error rate
    passes = sum(s.verdict(list(np.exp(rng.normal(0, 0.05, 15))))[0] == "pass" for _ in range(4000))
    assert passes / 4000 <= 0.025


def test_curtailment_never_stops_a_challenger_that_a_later_look_would_pass() -> None:
    """A "fail" at look n is final: on the full sequence, no look at or after n passes."""
    from trt_routes.selection.sequential import Stopping

    rng = np.random.default_rng(3)
    s = Stopping(0.02, 0.95, 15, 2)
    for _ in range(3000):
        full = list(np.exp(rng.normal(rng.choice([-0.05, -0.02, 0.0]), 0.03, 15)))
        verdict, n = s.verdict(full)
        if verdict != "fail":
            continue
        for look, k in s.boundaries.items():
            if look >= n:
                head = full[:look]
                assert not (sum(r >= 1 for r in head) <= k - 1 and float(np.median(head)) < 0.98)


def test_sequential_worker_schedule_and_decide_agree_and_stop_early() -> None:
    """run_sequential (the worker's loop) stops each challenger where decide's replay decides it."""
    from trt_routes.selection.sequential import Stopping, run_sequential

    settings = Confirm(candidates=2, margin=0.02, rounds=15)
    rng = np.random.default_rng(5)
    times = {"": 1.0, "-a=1": 0.85, "-b=1": 1.0}  # a clear winner and an A/A twin

    def measure(route: str, _round: int) -> float:
        return times[route] * float(np.exp(rng.normal(0, 0.01)))

    slots = run_sequential("", ("-a=1", "-b=1"), Stopping.of(settings, 2), measure)
    m = Remeasurement("", ("-a=1", "-b=1"), tuple(slots))
    d = decide(m, settings)
    assert d.winner == "-a=1"
    a, b = d.result("-a=1"), d.result("-b=1")
    assert a is not None and b is not None and a.passed and not b.passed
    assert a.rounds < 15 and b.rounds < 15 and "stopped early" in a.reason
    assert len(slots) < 1 + 2 * 2 * 15  # fewer turns than the fixed design
    for r in (a, b):
        assert sum(1 for route, _ in slots if route == r.route) == r.rounds


def test_a_record_stopped_by_one_rule_decides_another_only_when_that_rule_stops_within_it() -> None:
    """Nothing is re-measured that a stored re-measurement already decides, and nothing is decided from a
    record too short for the rule at hand."""
    from trt_routes.selection.confirm import decides
    from trt_routes.selection.sequential import Stopping, run_sequential

    strict = Confirm(candidates=1, margin=0.02, rounds=15, confidence=0.95)
    rng = np.random.default_rng(11)
    aa = run_sequential("", ("-a=1",), Stopping.of(strict, 1),
                        lambda r, k: float(np.exp(rng.normal(0, 0.02))))
    m = Remeasurement("", ("-a=1",), tuple(aa))
    assert decides(m, strict) and len(m.paired_ratios("-a=1")) < 15  # A/A: stopped against, early
    assert decides(m, Confirm(candidates=1, margin=0.5, rounds=15))  # a wider margin fails it sooner still
    # a clear winner stopped *for* under a loose rule does not decide a stricter one that needs more rounds
    win = Remeasurement("", ("-a=1",), (("", 1.0), *[s for _ in range(4) for s in (("-a=1", 0.9), ("", 1.0))]))
    loose = Confirm(candidates=1, margin=0.02, rounds=4, confidence=0.6)
    assert decides(win, loose) and decide(win, loose).winner == "-a=1"
    assert not decides(win, Confirm(candidates=1, margin=0.02, rounds=15))


def test_a_challenger_stopped_against_after_one_round_is_reported_with_its_ratio() -> None:
    """At 99% over two challengers and 12 rounds only 12 ratios below 1 pass: one at or above 1 decides."""
    settings = Confirm(candidates=2, margin=0.05, rounds=12, confidence=0.99)
    m = Remeasurement("", ("-a=1", "-b=1"), (("", 1.0), ("-a=1", 1.01), ("", 1.0), ("-b=1", 1.02), ("", 1.0)))
    d = decide(m, settings)
    assert d.winner == ""
    for r in d.results:
        assert r.ratio is not None and r.rounds == 1 and not r.passed and "not above the margin" in r.reason


def test_turns_are_sized_to_the_noise_within_the_floor_and_the_cap() -> None:
    from trt_routes.selection.sequential import spread_of, turn_size, turn_target

    target = turn_target(Confirm())  # margin 2%: a turn's median within 1.41% (the ratio of two within 2%)
    assert abs(target - 0.02 / 2 ** 0.5) < 1e-12
    quiet = [0.040 * (1 + 0.002 * ((i % 5) - 2)) for i in range(20)]  # 0.04 ms, 0.3% spread
    noisy = [0.040 * (1 + 0.2 * ((i % 5) - 2)) for i in range(20)]  # 30% spread
    assert turn_size(quiet, 10, 0.0, 20.0, target) == 10  # quiet: the iterations floor (0.4 ms)
    assert turn_size(noisy, 10, 0.0, 20.0, target) == 500  # noisy: up to the cap, 20 ms of 0.04 ms runs
    mid = [0.040 * (1 + 0.04 * ((i % 5) - 2)) for i in range(20)]  # ~6% spread: (1.25 * 0.06 / 0.0141)^2
    need = math.ceil((1.2533 * spread_of(mid) / target) ** 2)  # type: ignore[operator]
    assert 10 < need < 500 and turn_size(mid, 10, 0.0, 20.0, target) == need
    assert turn_size(mid, 10, 0.0, 20.0, target / 2) >= 3.5 * need  # the earlier target: ~4x the runs
    assert turn_size(quiet, 10, 5.0, 20.0, target) == 125  # slot_ms stays a floor: 5 ms of 0.04 ms runs
    assert turn_size(noisy, 10, 0.0, 0.0, 0.0) == 10  # sizing off: the fixed design
    assert turn_size(noisy, 1000, 0.0, 20.0, target) == 1000  # a p99 turn's 1000 runs are a floor too


def test_turn_sizing_is_part_of_the_re_measurement_key() -> None:
    assert remeasure_key("g", "", ["-a=1"], Confirm()) != remeasure_key("g", "", ["-a=1"], Confirm(max_slot_ms=0))
    assert remeasure_key("g", "", ["-a=1"], Confirm()) != remeasure_key("g", "", ["-a=1"], Confirm(max_slot_ms=10))


def test_turns_are_sized_from_the_baseline_trials_spread_when_apply_gives_it() -> None:
    """A 20-run pilot taken right after the engines' switch once read several times the spread of the
    baseline's own trial (100 runs after its warm-up) and asked for the 20 ms cap; apply gives the trial's."""
    from trt_routes.selection.sequential import spread_of, turn_size, turn_target

    target = turn_target(Confirm())
    steady = [0.1 * (1 + 0.002 * ((i % 5) - 2)) for i in range(100)]  # the trial: 0.3% spread
    cold = [0.1 * (1 + 0.2 * ((i % 5) - 2)) for i in range(20)]  # a pilot read just after a switch: 30%
    assert spread_of(steady) is not None and spread_of(steady) < 0.01  # type: ignore[operator]
    assert spread_of([0.1, 0.2]) is None  # too few to tell
    assert turn_size(cold, 10, 0.0, 20.0, target) == 200  # the pilot alone: the cap (20 ms of 0.1 ms runs)
    assert turn_size(cold, 10, 0.0, 20.0, target, spread_of(steady)) == 10  # the trial's spread: the floor


def test_the_spread_within_repeats_leaves_out_the_drift_between_them() -> None:
    """Five repeats of 20 runs, each repeat 10% slower than the one before but quiet inside: the runs'
    spread around the overall median is large, within each repeat it is small (pairing cancels the drift)."""
    from trt_routes.selection.sequential import spread_of

    samples = [0.2 * (1 + 0.1 * r) * (1 + 0.002 * ((i % 5) - 2)) for r in range(5) for i in range(20)]
    overall, within = spread_of(samples), spread_of(samples, block=20)
    assert overall is not None and within is not None
    assert overall > 0.05 and within < 0.005
    assert spread_of(samples, block=200) == overall  # fewer than two repeats: the overall spread


def _pairs(slots: list[tuple[str, float]], baseline: str = "") -> dict[str, list[tuple[int, int]]]:
    """(challenger slot, its baseline slot) per challenger, by the rule ``paired_ratios`` reads."""
    out: dict[str, list[tuple[int, int]]] = {}
    for i, (r, _) in enumerate(slots):
        if r == baseline:
            continue
        j = i - 1 if i > 0 and slots[i - 1][0] == baseline else i + 1
        assert j < len(slots) and slots[j][0] == baseline, f"slot {i} ({r}) has no baseline turn beside it"
        out.setdefault(r, []).append((i, j))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_two_challengers_share_one_baseline_turn_and_never_their_own(seed: int) -> None:
    """C1 B C2: 1.5 turns per ratio while two or more challengers are open, 2 for the last one alone; every
    challenger turn sits beside a baseline turn that no other turn of the same challenger uses, so each
    challenger's ratios are independent; each goes before its baseline turn about as often as after it."""
    from trt_routes.selection.sequential import Stopping, run_sequential

    rng = np.random.default_rng(seed)
    routes = ("-a=1", "-b=1", "-c=1")
    times = {"": 1.0, "-a=1": 0.9, "-b=1": 1.0, "-c=1": 1.0}  # one clear winner, two A/A twins
    slots = run_sequential("", routes, Stopping.of(Confirm(candidates=3, margin=0.02, rounds=15), 3),
                           lambda r, k: times[r] * float(np.exp(rng.normal(0, 0.02))))
    pairs = _pairs(slots)
    m = Remeasurement("", routes, tuple(slots))
    for route, ps in pairs.items():
        assert len({b for _, b in ps}) == len(ps)  # no baseline turn serves one challenger twice
        assert m.paired_ratios(route) == [slots[c][1] / slots[b][1] for c, b in ps]
        before = sum(1 for c, b in ps if c < b)
        assert abs(before - (len(ps) - before)) <= max(2, len(ps) // 3)
    ratios = sum(len(ps) for ps in pairs.values())
    uses = [b for ps in pairs.values() for _, b in ps]
    shared = sum(1 for b in set(uses) if uses.count(b) == 2)
    assert sum(1 for r, _ in slots if r == "") == len(set(uses))  # every baseline turn serves a ratio
    assert shared >= 1 and len(set(uses)) == ratios - shared  # each shared turn saves one
    assert len(slots) < 1 + 2 * ratios  # fewer turns than baseline-between-every-slot for the same ratios
    assert decide(m, Confirm(candidates=3, margin=0.02, rounds=15)).winner == "-a=1"


def test_records_of_the_earlier_layout_read_as_they_were_measured() -> None:
    """A "sequential-1" record (B C1 B C2 B ...: every challenger slot after its baseline slot) pairs as
    before, and its key stays readable (``READ_DESIGNS``) beside the current design's."""
    from trt_routes.selection.confirm import DESIGN, READ_DESIGNS

    old = Remeasurement("", ("-a=1", "-b=1"), (("", 1.0), ("-a=1", 0.9), ("", 1.1), ("-b=1", 1.21), ("", 1.0),
                                               ("-b=1", 1.05), ("", 1.0), ("-a=1", 0.95)))
    assert old.paired_ratios("-a=1") == pytest.approx([0.9, 0.95])
    assert old.paired_ratios("-b=1") == pytest.approx([1.1, 1.05])
    assert READ_DESIGNS[0] == DESIGN and "sequential-1" in READ_DESIGNS
    keys = {remeasure_key("g", "", ["-a=1"], Confirm(), design=d) for d in READ_DESIGNS}
    assert len(keys) == len(READ_DESIGNS) and remeasure_key("g", "", ["-a=1"], Confirm()) in keys


def test_a_failed_turn_gives_no_ratio_in_the_replay_as_in_the_worker() -> None:
    """A turn timed at 0, below 0 or NaN pairs with nothing (the worker's ``run_sequential`` skips it too), so a
    replayed decision never counts a NaN ratio as below 1."""
    nan = float("nan")
    m = Remeasurement("", ("-a=1",), (("", 1.0), ("-a=1", nan), ("", 1.0), ("-a=1", 0.0), ("-a=1", -1.0),
                                      ("", 1.0), ("-a=1", 0.9), ("", nan), ("-a=1", 0.8)))
    assert m.paired_ratios("-a=1") == pytest.approx([0.9])


def test_an_interval_that_cannot_be_computed_is_said_in_words_and_a_split_confidence_is_named() -> None:
    """Three rounds cannot give a 98.3% order-statistic interval: no '0.000-inf'; with two challengers the 95% is
    split over them (Bonferroni), and the reason says so beside the 97.5%."""
    few = Remeasurement("", ("-a=1",), (("", 1.0), ("-a=1", 0.5), ("", 1.0), ("-a=1", 0.5), ("", 1.0), ("-a=1", 0.5)))
    (r,) = decide(few, Confirm(margin=0.02, rounds=3)).results
    assert "too few rounds for a 95.0% interval" in r.reason and "inf" not in r.reason
    two = measured("", {"": 1.0, "-a=1": 0.8, "-b=1": 0.9}, noise=0.001)
    reasons = [x.reason for x in decide(two, Confirm(candidates=2, margin=0.02, rounds=12)).results]
    assert all("97.5% interval" in x and "the 95% split over 2 challengers" in x for x in reasons), reasons


def test_a_default_that_led_the_search_and_lost_side_by_side_is_not_a_second_winner() -> None:
    """The default led the search by a hair and a challenger within its interval beat it side by side: one
    verdict says winner (the challenger's); the default's says it led the search and lost."""
    close = {t.route: t for t in [trial("", 0.99), trial("-a=1", 1.0)]}
    sel = select(close, list(close), TOL)
    assert sel.winner == ""
    out, requests = resolve(sel, SETTINGS, None, store_of({}))
    assert requests == [Request("", ("-a=1",))]
    won = measured("", {"": 1.0, "-a=1": 0.9}, noise=0.01)
    out, _ = resolve(sel, SETTINGS, None, store_of({("", ("-a=1",)): won}))
    assert out.winner == "-a=1"
    assert [v.route for v in out.verdicts if v.reason.startswith("winner")] == ["-a=1"]
    assert "beat it side by side" in out.verdict("").reason  # type: ignore[union-attr]


def test_a_confirmed_challenger_that_lost_to_another_says_the_winner_ran_faster_side_by_side() -> None:
    """-a=1 was fastest in the search and both challengers beat the default side by side, but -b=1 ran faster in
    those rounds: -a=1's verdict says it was confirmed and why it still lost, not only that it was confirmed."""
    search = {t.route: t for t in [trial("", 1.0), trial("-a=1", 0.70), trial("-b=1", 0.72)]}
    sel = select(search, list(search), TOL)
    assert sel.winner == "-a=1"
    side_by_side = measured("", {"": 1.0, "-a=1": 0.8, "-b=1": 0.7}, noise=0.01)
    out, _ = resolve(sel, SETTINGS, None, store_of({("", ("-a=1", "-b=1")): side_by_side}))
    assert out.winner == "-b=1"
    lost = out.verdict("-a=1").reason  # type: ignore[union-attr]
    assert lost.startswith("fastest in the search (0.7 ms); confirmed: ") and \
        re.search(r"but the winner ran faster in the same rounds \(0\.70\d ms against 0\.80\d ms", lost), lost
    assert "ran faster" not in out.verdict("-b=1").reason  # type: ignore[union-attr]
