"""The adaptive strategy (screening, noise-aware positives, combination search, warm starts) and the
budget that counts only new builds (trt_routes.search.job.JobSearch)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from trt_routes.catalog import Catalog, Knob
from trt_routes.routes import parse_expression, route_dict
from trt_routes.search import Outcome, make_search
from trt_routes.search.adaptive import AdaptiveSearch, beats_beyond_noise
from trt_routes.search.job import JobSearch

CATALOG = Catalog(backend="test", version="1", knobs=(
    Knob("-a", ("0", "1"), "0"), Knob("-b", ("0", "1"), "0"), Knob("-c", ("x", "y", "z"), "x"),
    Knob("-d", ("0", "1"), "0"), Knob("-p", ("0", "1"), "0"),
))
EXPR = parse_expression("-a=[0|1] -b=[0|1] -c=[x|y|z] -d=[0|1] -p=1", CATALOG)
#: the time factor of each non-default value; -b alone is not worth it, but with -a it is (interaction)
EFFECT = {("-a", "1"): 0.80, ("-b", "1"): 1.00, ("-c", "y"): 0.90, ("-c", "z"): 1.10, ("-d", "1"): 1.20}


def time_of(route: str) -> float:
    assign = route_dict(route)
    t = 1.0
    for (option, value), factor in EFFECT.items():
        if assign.get(option) == value:
            t *= factor
    if assign.get("-a") == "1" and assign.get("-b") == "1":
        t *= 0.9
    return t


def outcome(route: str, noise: float = 0.002) -> Outcome:
    t = time_of(route)
    return Outcome(True, t, t * (1 - noise), t * (1 + noise))


def run(search: AdaptiveSearch | JobSearch, known: dict[str, Outcome] | None = None,
        noise: float = 0.002) -> tuple[dict[str, Outcome], list[list[str]]]:
    known = dict(known or {})
    batches = []
    while batch := search.next_batch(known):
        assert not set(batch) & set(known)
        batches.append(batch)
        for route in batch:
            known[route] = outcome(route, noise)
    return known, batches


def test_screening_then_positives_combined_then_descent_finds_the_interaction() -> None:
    search = make_search("adaptive", EXPR, CATALOG)
    assert isinstance(search, AdaptiveSearch)
    known, batches = run(search)
    # batch 1: the baseline (pins kept) and every one-knob route
    assert batches[0] == ["-p=1", "-a=1 -p=1", "-b=1 -p=1", "-c=y -p=1", "-c=z -p=1", "-d=1 -p=1"]
    assert search.positives(known) == {"-a": ["1"], "-c": ["y"]}
    best = min(known, key=lambda r: known[r].median_ms or math.inf)
    assert best == "-a=1 -b=1 -c=y -p=1"  # -b is found by re-screening around the incumbent
    assert len(known) < 24 and set(search.candidates(known)) == set(known)


def test_a_gain_within_the_noise_is_not_a_positive() -> None:
    search = AdaptiveSearch(EXPR, CATALOG)
    known = {r: outcome(r) for r in search.phase1}
    known["-a=1 -p=1"] = Outcome(True, 0.95, 0.80, 1.10)  # 5% faster, but +-15% noise
    known["-c=y -p=1"] = Outcome(True, 0.985, 0.984, 0.986)  # 1.5%: above min_gain (1%) and the noise
    assert search.positives(known) == {"-c": ["y"]}
    assert beats_beyond_noise(Outcome(True, 0.95, 0.94, 0.96), Outcome(True, 1.0, 0.99, 1.01), 0.01)
    assert not beats_beyond_noise(Outcome(True, 0.995, 0.994, 0.996), Outcome(True, 1.0, 0.999, 1.001), 0.01)
    assert not beats_beyond_noise(Outcome(False, 0.5, 0.5, 0.5), Outcome(True, 1.0, 0.99, 1.01), 0.01)


def test_no_positive_knob_ends_after_screening() -> None:
    search = AdaptiveSearch(EXPR, CATALOG)
    known = {r: Outcome(True, 1.0, 0.99, 1.01) for r in search.phase1}
    assert search.next_batch(known) == [] and search.pending(known) is None
    assert "waits for 6 screening" in (search.pending({}) or "")


def test_warm_starts_are_projected_onto_the_expression_and_measured_first() -> None:
    warm = ("-a=1 -b=1 -c=y", "-a=1 -q=9", "-c=y -d=1 -p=0", "not a route", "-b=1 -p=1")
    search = AdaptiveSearch(EXPR, CATALOG, warm=warm)
    # -p is pinned; a knob outside the expression is dropped; an unparsable route is ignored
    assert search.warm == ("-a=1 -b=1 -c=y -p=1", "-a=1 -p=1", "-c=y -d=1 -p=1", "-b=1 -p=1")
    assert search.next_batch({})[:4] == ["-p=1", "-a=1 -b=1 -c=y -p=1", "-a=1 -p=1", "-c=y -d=1 -p=1"]
    cold, _ = run(AdaptiveSearch(EXPR, CATALOG))
    hot, _ = run(search)
    best = min(time_of(r) for r in cold)
    assert min(time_of(r) for r in hot) == best


def test_budget_counts_only_new_builds_and_cuts_the_batch() -> None:
    cached = {r: outcome(r) for r in ["-p=1", "-a=1 -p=1", "-b=1 -p=1"]}
    search = JobSearch(AdaptiveSearch(EXPR, CATALOG), (), frozenset(cached), max_builds=2, max_minutes=None)
    batch = search.next_batch(cached)
    assert batch == ["-c=y -p=1", "-c=z -p=1"]  # the cached screening routes are free
    known, _ = run(search, cached)
    assert search.builds(known) == 2 and search.exhausted(known) == "max_builds 2 spent"
    assert search.unfinished(known) and search.pending(known) is None
    # a later apply resumes with what was spent: nothing more under the same budget, more under a raised one
    again = JobSearch(search.inner, (), frozenset(known), 2, None, spent_builds=2)
    assert again.next_batch(known) == []
    raised = JobSearch(search.inner, (), frozenset(known), 5, None, spent_builds=2)
    assert len(raised.next_batch(known)) == 1 and raised.next_batch(known)[0] not in known


def test_time_budget_uses_the_clock() -> None:
    now = [0.0]
    search = JobSearch(AdaptiveSearch(EXPR, CATALOG), (), frozenset(), None, 1.0, clock=lambda: now[0])
    assert search.next_batch({})
    now[0] = 61.0
    assert search.next_batch({}) == [] and search.exhausted({}) == "max_minutes 1 spent"


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_adaptive_never_proposes_a_known_route_and_ends(data: st.DataObject) -> None:
    search = AdaptiveSearch(EXPR, CATALOG, warm=("-a=1 -c=z",))
    known: dict[str, Outcome] = {}
    for _ in range(40):
        batch = search.next_batch(known)
        if not batch:
            break
        assert not set(batch) & set(known) and len(set(batch)) == len(batch)
        for route in batch:
            ok = data.draw(st.booleans())
            median = data.draw(st.floats(0.5, 2.0))
            width = data.draw(st.floats(0.0, 0.3))
            known[route] = Outcome(ok, median if ok else None, median * (1 - width), median * (1 + width))
    assert search.next_batch(known) == []
    assert set(search.candidates(known)) == set(known)


# -- build costs: cheap screens first, and max_minutes honoured by estimate ----------------------------

COSTED = Catalog(backend="test", version="1", knobs=(
    Knob("-slow", ("0", "1"), "0", cost=6.0), Knob("-a", ("0", "1"), "0"), Knob("-on", ("0", "1"), "1", cost=3.0),
    Knob("-b", ("0", "1"), "0", cost=1.5),
))


def test_route_cost_is_the_product_of_the_costs_of_knobs_switched_on() -> None:
    assert COSTED.route_cost({}) == 1.0
    assert COSTED.route_cost({"-slow": "1", "-b": "1"}) == 9.0
    assert COSTED.route_cost({"-slow": "0", "-on": "1"}) == 1.0  # off, or at its default: no cost
    assert COSTED.route_cost({"-on": "0"}) == 1.0  # switching a feature off never costs more
    many = Catalog(backend="test", version="1", knobs=tuple(Knob(f"-k{i}", ("0", "1"), "0", cost=6.0)
                                                          for i in range(5)))
    assert many.route_cost({f"-k{i}": "1" for i in range(5)}) == 50.0  # capped


def test_adaptive_screens_the_cheapest_builds_first_in_token_order_among_equals() -> None:
    expr = parse_expression("-slow=[0|1] -a=[0|1] -b=[0|1]", COSTED)
    search = AdaptiveSearch(expr, COSTED)
    assert search.next_batch({}) == ["", "-a=1", "-b=1", "-slow=1"]
    # without costs the order is the expression's (every existing catalog: nothing changes for it)
    plain = AdaptiveSearch(parse_expression("-d=[0|1] -a=[0|1]", CATALOG), CATALOG)
    assert plain.next_batch({}) == ["", "-d=1", "-a=1"]


def test_a_build_that_would_overrun_max_minutes_is_not_started() -> None:
    now = [0.0]
    expr = parse_expression("-slow=[0|1] -a=[0|1]", COSTED)
    search = JobSearch(AdaptiveSearch(expr, COSTED), (), frozenset(), None, 1.0, clock=lambda: now[0],
                       cost=lambda r: COSTED.route_cost(route_dict(r)))
    assert search.next_batch({}) == ["", "-a=1", "-slow=1"]  # nothing built yet: only the time left counts
    now[0] = 20.0  # 40 s left; the default build took 8 s, so -slow=1 (cost 6) needs about 48 s
    known = {"": Outcome(True, 1.0, build_s=8.0)}
    assert search.unit_s(known) == 8.0 and search.fits("-a=1", 8.0)  # the baseline here is the default
    assert search.exhausted(known) is None
    assert search.next_batch(known) == ["-a=1"]  # cut before the build that would overrun
    assert search.exhausted(known) == "max_minutes 1: 0.7 min left, the next build (-slow=1) needs about 0.8"
    assert search.unfinished(known)
    # a default build of 2 s makes -slow=1 about 12 s, which fits
    quick = JobSearch(AdaptiveSearch(expr, COSTED), (), frozenset(), None, 1.0, clock=lambda: now[0],
                      cost=lambda r: COSTED.route_cost(route_dict(r)))
    assert quick.next_batch({"": Outcome(True, 1.0, build_s=2.0)}) == ["-a=1", "-slow=1"]
    unbounded = JobSearch(AdaptiveSearch(expr, COSTED), (), frozenset(), None, None)
    assert unbounded.fits("-slow=1", 8.0) and unbounded.next_batch(known) == ["-a=1", "-slow=1"]
