"""adaptive under a build budget too small for a one-knob scan (issue 30): group screening, a second screening
on the incumbent, passengers dropped, reproducible proposals; and the pooled one-knob screening reference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trt_routes.backends.landscape_model import ModelLandscape, validate_model
from trt_routes.routes import parse_expression, route_dict
from trt_routes.search import Outcome, make_search
from trt_routes.search.adaptive import AdaptiveSearch
from trt_routes.search.job import JobSearch
from trt_routes.search.screening import interleave, split_by_knob

N = 48


def landscape() -> ModelLandscape:
    """48 two-valued knobs: -k05=1 is 20% faster, -k30=1 10% faster, -k17=1 15% slower, -k40=1 crashes."""
    knobs = [{"option": f"-k{i:02d}", "values": ["0", "1"], "default": "0"} for i in range(N)]
    return validate_model({
        "format": "trt-routes/landscape@2", "knobs": knobs,
        "failures": [{"when": {"-k40": "1"}, "status": "crashed"}],
        "profiles": {"p": {"base_ms": 10.0, "effects": {"-k05": {"1": -0.22}, "-k30": {"1": -0.105},
                                                        "-k17": {"1": 0.14}}}}})


def outcome_of(land: ModelLandscape, route: str) -> Outcome:
    """As ``outcomes`` reads a trial: a route that fails the accuracy gate was built and timed, a crash was not."""
    status = land.status(route)
    if status not in ("ok", "accuracy-failed"):
        return Outcome(False, None)
    t = land.true_ms(route, "p")
    return Outcome(status == "ok", t, t * 0.995, t * 1.005)


def drive(search: JobSearch, land: ModelLandscape) -> dict[str, Outcome]:
    known: dict[str, Outcome] = {}
    while batch := search.next_batch(known):
        for route in batch:
            known[route] = outcome_of(land, route)
    return known


def test_a_budget_below_the_scan_screens_in_groups_and_finds_the_gains_within_it() -> None:
    land = landscape()
    expr = parse_expression(land.expression_text(), land.catalog)
    inner = make_search("adaptive", expr, land.catalog, budget=20)
    assert isinstance(inner, AdaptiveSearch) and inner.grouped
    first = inner.next_batch({"": outcome_of(land, "")})
    assert 1 < len(first) < N and max(len(route_dict(r)) for r in first) > 1  # several knobs per build
    known = drive(JobSearch(inner, (), frozenset(), 20, None), land)
    assert len(known) <= 20
    best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
    assign = route_dict(best)
    assert assign.get("-k05") == "1" and assign.get("-k30") == "1" and "-k17" not in assign
    assert land.status(best) == "ok"
    # pure: replaying the same outcomes proposes the same routes
    again = make_search("adaptive", expr, land.catalog, budget=20)
    assert again.candidates(known) == inner.candidates(known)


def test_an_unbounded_search_or_a_small_group_keeps_the_one_knob_scan() -> None:
    land = landscape()
    expr = parse_expression(land.expression_text(), land.catalog)
    unbounded = make_search("adaptive", expr, land.catalog)
    roomy = make_search("adaptive", expr, land.catalog, budget=500)
    assert isinstance(unbounded, AdaptiveSearch) and not unbounded.grouped
    assert isinstance(roomy, AdaptiveSearch) and not roomy.grouped
    small = parse_expression("-k00=[0|1] -k01=[0|1] -k02=[0|1]", land.catalog)
    tight = make_search("adaptive", small, land.catalog, budget=2)
    assert isinstance(tight, AdaptiveSearch) and not tight.grouped


def test_a_budget_short_of_twice_the_scan_screens_in_groups_and_leaves_what_it_cannot_use() -> None:
    """48 values: a budget of 90 cannot pay for the scan (49 routes) and its combinations (the scan may take half
    of it), so the values are screened in groups; groups of one value would be a scan, so the procedure stops at
    5/4 builds per value (60) and the search is complete, not stopped at its budget."""
    land = landscape()
    expr = parse_expression(land.expression_text(), land.catalog)
    inner = make_search("adaptive", expr, land.catalog, budget=90)
    assert isinstance(inner, AdaptiveSearch) and inner.grouped
    search = JobSearch(inner, (), frozenset(), 90, None)
    known = drive(search, land)
    assert len(known) <= 60 and not search.unfinished(known)
    best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
    assert {"-k05": "1", "-k30": "1"}.items() <= route_dict(best).items() and "-k17" not in route_dict(best)


def test_max_minutes_that_cannot_pay_for_the_scan_screens_in_groups_sized_by_the_baseline_build() -> None:
    """max_minutes 20 with one-minute builds pays for about 20 builds, not for the 49 of the scan: the first
    batch is the baseline alone (its build time says so), then the values are screened in groups within
    those 20 builds. A build time that pays for the scan twice over keeps it."""
    land = landscape()
    expr = parse_expression(land.expression_text(), land.catalog)

    def timed(route: str) -> Outcome:
        o = outcome_of(land, route)
        return Outcome(o.ok, o.median_ms, o.ci_low, o.ci_high, build_s=60.0)

    inner = make_search("adaptive", expr, land.catalog, minutes=20.0)
    assert isinstance(inner, AdaptiveSearch) and not inner.grouped and inner.timed
    assert inner.next_batch({}) == [""] and "max_minutes" in (inner.pending({}) or "")
    known: dict[str, Outcome] = {}
    while batch := inner.next_batch(known):
        known.update((r, timed(r)) for r in batch)
    assert inner.screen_budget(known) == 20 and len(known) <= 20
    best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
    assert {"-k05": "1", "-k30": "1"}.items() <= route_dict(best).items() and "-k17" not in route_dict(best)
    roomy = make_search("adaptive", expr, land.catalog, minutes=200.0)
    assert isinstance(roomy, AdaptiveSearch) and roomy.screen_budget({"": timed("")}) is None
    assert len(roomy.next_batch({"": timed("")})) == N  # the one-knob scan


def test_groups_never_hold_two_values_of_one_knob() -> None:
    units = [("-a", "1"), ("-b", "1"), ("-a", "2"), ("-c", "1"), ("-d", "1")]
    groups = split_by_knob(units, 3)
    assert [u for g in groups for u in g] == units
    assert all(len({o for o, _ in g}) == len(g) <= 3 for g in groups)


def test_a_slow_draw_of_the_baseline_does_not_make_neutral_knobs_positive() -> None:
    land = landscape()
    expr = parse_expression(land.expression_text(), land.catalog)
    search = make_search("adaptive", expr, land.catalog)
    assert isinstance(search, AdaptiveSearch)
    known: Mapping[str, Outcome] = {r: outcome_of(land, r) for r in search.phase1}
    slow = dict(known)
    slow[""] = Outcome(True, 10.4, 10.35, 10.45)  # the one default trial drew 4% slow
    assert set(search.positives(slow)) == set(search.positives(known)) == {"-k05", "-k30"}


def test_a_knob_that_helps_only_beside_a_gain_is_found_by_screening_again_on_the_incumbent() -> None:
    """-k11=1 changes nothing alone and is 10% faster beside -k05=1: the first screening (on the default)
    cannot see it; screening the neutral values again on the incumbent, which holds -k05=1, does."""
    land = landscape()
    data = land.data.model_dump(mode="json", exclude_none=True)
    data["profiles"]["p"]["interactions"] = [{"when": {"-k05": "1", "-k11": "1"}, "log": -0.105}]
    land = validate_model(data)
    expr = parse_expression(land.expression_text(), land.catalog)
    known = drive(JobSearch(make_search("adaptive", expr, land.catalog, budget=30), (), frozenset(), 30, None), land)
    assert len(known) <= 30
    best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
    assert {"-k05": "1", "-k11": "1", "-k30": "1"}.items() <= route_dict(best).items()
    assert "-k17" not in route_dict(best)


def test_a_gain_masked_by_a_loss_in_its_first_group_is_found_when_screened_again_among_other_values() -> None:
    """-k08=1 is 15% faster and -k07=1 15% slower: side by side in their first-level group they cancel, so
    both look neutral. The second screening interleaves the neutral values, so -k08=1 meets other values,
    shows its gain and joins the incumbent; -k07=1 stays out."""
    knobs = [{"option": f"-k{i:02d}", "values": ["0", "1"], "default": "0"} for i in range(N)]
    land = validate_model({"format": "trt-routes/landscape@2", "knobs": knobs,
                           "profiles": {"p": {"base_ms": 10.0, "effects": {"-k07": {"1": 0.16}, "-k08": {"1": -0.16},
                                                                          "-k30": {"1": -0.105}}}}})
    expr = parse_expression(land.expression_text(), land.catalog)
    known = drive(JobSearch(make_search("adaptive", expr, land.catalog, budget=30), (), frozenset(), 30, None), land)
    group = "-k06=1 -k07=1 -k08=1"  # their first-level group: no faster than the default
    assert known[group].median_ms == known[""].median_ms
    best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
    assert route_dict(best).get("-k08") == "1" and "-k07" not in route_dict(best)
    assert interleave([("-a", "1"), ("-b", "1"), ("-c", "1"), ("-d", "1")], 2) == [
        ("-a", "1"), ("-c", "1"), ("-b", "1"), ("-d", "1")]


def test_a_group_that_fails_the_gate_but_runs_faster_is_split_before_groups_that_crashed() -> None:
    """Five first-level groups crash and one fails the accuracy gate (-k45=1) while it runs 20% faster (-k46=1
    beside it). A budget of 30 builds has room to split only a few failed groups: the faster one goes first,
    so -k46=1 is found though its group comes last."""
    knobs = [{"option": f"-k{i:02d}", "values": ["0", "1"], "default": "0"} for i in range(N)]
    land = validate_model({
        "format": "trt-routes/landscape@2", "knobs": knobs,
        "failures": [*({"when": {f"-k{i:02d}": "1"}, "status": "crashed"} for i in (1, 4, 7, 10, 13)),
                     {"when": {"-k45": "1"}, "status": "accuracy-failed"}],
        "profiles": {"p": {"base_ms": 10.0, "effects": {"-k46": {"1": -0.22}, "-k30": {"1": -0.105}}}}})
    expr = parse_expression(land.expression_text(), land.catalog)
    known = drive(JobSearch(make_search("adaptive", expr, land.catalog, budget=30), (), frozenset(), 30, None), land)
    failed_gate = [r for r in known if land.status(r) == "accuracy-failed"]
    assert failed_gate and all(known[r].median_ms is not None and not known[r].ok for r in failed_gate)
    best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
    assert {"-k46": "1", "-k30": "1"}.items() <= route_dict(best).items() and "-k45" not in route_dict(best)


def test_faster_groups_that_fail_together_are_added_by_halves_not_one_at_a_time() -> None:
    """Four first-level groups run faster (-k01=1, -k05=1, -k09=1, -k13=1), but -k01=1 and -k13=1 crash the build
    together. Their sum fails, so the faster half of the groups is tried together; the rest is screened again on
    top of it. Falling back to the fastest group alone (as before) gained one group per round: at 20 builds, -k01=1
only."""
    knobs = [{"option": f"-k{i:02d}", "values": ["0", "1"], "default": "0"} for i in range(N)]
    land = validate_model({
        "format": "trt-routes/landscape@2", "knobs": knobs,
        "failures": [{"when": {"-k01": "1", "-k13": "1"}, "status": "crashed"}],
        "profiles": {"p": {"base_ms": 10.0, "effects": {"-k01": {"1": -0.22}, "-k05": {"1": -0.15},
                                                        "-k09": {"1": -0.12}, "-k13": {"1": -0.1}}}}})
    expr = parse_expression(land.expression_text(), land.catalog)
    known = drive(JobSearch(make_search("adaptive", expr, land.catalog, budget=20), (), frozenset(), 20, None), land)
    assert len(known) <= 20 and any(land.status(r) == "crashed" and len(route_dict(r)) > 8 for r in known)  # the sum
    best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
    assert {"-k01": "1", "-k05": "1"}.items() <= route_dict(best).items() and "-k13" not in route_dict(best)


def test_builds_a_step_cannot_use_go_to_the_groups_left_unscreened() -> None:
    """Every fourth value crashes: nearly every first-level group fails and is split, and the screening of
    their halves outlasts the first step's share of the budget. The second screening has no neutral value to
    screen again and no group was taken whole, so before this, the search ended with a third of its budget
    unused and the default route (11 builds of 16). The halves the first step left are screened with the rest."""
    knobs = [{"option": f"-k{i:02d}", "values": ["0", "1"], "default": "0"} for i in range(N)]
    land = validate_model({
        "format": "trt-routes/landscape@2", "knobs": knobs,
        "failures": [{"when": {f"-k{i:02d}": "1"}, "status": "crashed"} for i in range(1, N, 4)],
        "profiles": {"p": {"base_ms": 10.0, "effects": {"-k06": {"1": -0.22}, "-k30": {"1": -0.105}}}}})
    expr = parse_expression(land.expression_text(), land.catalog)
    for budget in (16, 24):
        inner = make_search("adaptive", expr, land.catalog, budget=budget)
        assert isinstance(inner, AdaptiveSearch) and inner.grouped
        known = drive(JobSearch(inner, (), frozenset(), budget, None), land)
        assert len(known) == budget
        best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
        assert route_dict(best).get("-k06") == "1" and land.status(best) == "ok"


def cuda_ep_model(levels: list[str], profile: dict[str, Any]) -> ModelLandscape:
    """13 knobs shaped like ONNX Runtime's CUDA catalog (the level knob's default its last value, ``levels``),
    one value failing the build, and ``profile`` as the only profile."""
    catalog = [("-precision", ["fp32", "fp16"]), ("-level", levels), ("-nhwc", ["0", "1"]), ("-graph", ["0", "1"]),
               ("-tf32", ["1", "0"]), ("-algo", ["EXHAUSTIVE", "HEURISTIC", "DEFAULT"]),
               *((f"-k{i}", ["0", "1"]) for i in range(7))]
    return validate_model({
        "format": "trt-routes/landscape@2",
        "knobs": [{"option": o, "values": v, "default": v[-1] if o == "-level" else v[0]} for o, v in catalog],
        "failures": [{"when": {"-k4": "1"}, "status": "build-error"}], "profiles": {"p": profile}})


def test_another_value_of_a_knob_the_incumbent_moved_is_screened_in_place_of_the_value_taken() -> None:
    """BERT on the H200's CUDA EP (bench/RESULTS.md, gpu_search.py run 2), as a model: the level knob's
    ``extended`` changes nothing alone and gains 18% beside float16; its ``disabled`` gains 1% and comes in with
    a faster group. Before this, no other value of a knob the incumbent had moved was ever screened, so no budget
    up to the scan's found ``extended``. It is now screened last, in place of ``disabled``."""
    land = cuda_ep_model(["disabled", "basic", "extended", "all"], {
        "base_ms": 3.3, "effects": {"-precision": {"fp16": -0.25}, "-graph": {"1": -0.2},
                                    "-level": {"disabled": -0.01}, "-nhwc": {"1": -0.005}},
        "interactions": [{"when": {"-level": "extended", "-precision": "fp16"}, "log": -0.2}]})
    expr = parse_expression(land.expression_text(), land.catalog)
    inner = make_search("adaptive", expr, land.catalog, budget=16)
    assert isinstance(inner, AdaptiveSearch) and inner.grouped
    known = drive(JobSearch(inner, (), frozenset(), 16, None), land)
    assert len(known) <= 16
    best = min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0)
    assert {"-precision": "fp16", "-graph": "1", "-level": "extended"}.items() <= route_dict(best).items()


def test_a_passenger_that_slows_the_gain_it_came_with_is_replaced_from_14_builds() -> None:
    """ViT-B/16 on the H100's CUDA EP (bench/RESULTS.md, gpu_search.py run 5), as a model: the level knob's
    ``disabled`` changes nothing alone and costs 13% beside float16; it comes in with float16's group. At 12
    builds neither the passenger drops nor the level's other values are reached (the model ends 1.12 from the
    best, ViT on the GPU 1.13); from 14 the level's other values, screened in place of ``disabled``, remove it."""
    land = cuda_ep_model(["disabled", "basic", "extended", "layout", "all"], {
        "base_ms": 4.0, "effects": {"-precision": {"fp16": -0.3}, "-graph": {"1": -0.15},
                                    "-level": {"disabled": -0.01, "layout": -0.005}},
        "interactions": [{"when": {"-level": "disabled", "-precision": "fp16"}, "log": 0.12}]})
    expr = parse_expression(land.expression_text(), land.catalog)
    chosen: dict[int, dict[str, str]] = {}
    for budget in (12, 14):
        inner = make_search("adaptive", expr, land.catalog, budget=budget)
        known = drive(JobSearch(inner, (), frozenset(), budget, None), land)
        assert len(known) <= budget
        chosen[budget] = route_dict(min((r for r, o in known.items() if o.ok), key=lambda r: known[r].median_ms or 0.0))
    assert chosen[12].get("-level") == "disabled"  # the limit run 5 met, kept visible
    assert chosen[14].get("-level") != "disabled"
    assert {"-precision": "fp16", "-graph": "1"}.items() <= chosen[14].items()


def test_a_trial_timed_at_0_ms_is_not_divided_by() -> None:
    """A median of 0 ms (a landscape with absurd noise drew one) made group screening raise ZeroDivisionError in
    apply, and in every plan and explain after it: such an outcome teaches nothing and is passed over."""
    land = landscape()
    expr = parse_expression(land.expression_text(), land.catalog)
    inner = make_search("adaptive", expr, land.catalog, budget=20)
    search = JobSearch(inner, (), frozenset(), 20, None)
    known: dict[str, Outcome] = {}
    while batch := search.next_batch(known):
        for i, route in enumerate(batch):
            known[route] = Outcome(True, 0.0, 0.0, 0.0) if i == 1 else outcome_of(land, route)
    assert len(known) <= 20 and inner.candidates(known)
