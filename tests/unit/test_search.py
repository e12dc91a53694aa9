"""Tests for the trtexec-compatible search strategies (trt_routes.search)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import RouteError
from trt_routes.routes import Expression, Token, parse_expression, route_dict
from trt_routes.search import MODES, Outcome, expand, make_search
from trt_routes.search.strategies import MixedSearch

CATALOG = Catalog(
    backend="test",
    version="1",
    knobs=(
        Knob("-conv_use_long_w", ("on", "off"), "on"),
        Knob("-match_ragged_mha", ("on", "off"), "off"),
        Knob("-copy_ppg", ("on", "off"), "on"),
        Knob("-kgen:codegen:cuda_tile", ("0", "1", "2", "3"), "1"),
        Knob("-cask_fusion:num_tactics", None, "0"),
        Knob("-slice_fusion", ("on", "off"), "on"),
    ),
)

THREE_ON_OFF = "-conv_use_long_w=[on|off] -match_ragged_mha=[on|off] -copy_ppg=[on|off]"
LONG_W = "-conv_use_long_w=off"
RAGGED = "-match_ragged_mha=on"
COPY = "-copy_ppg=off"


def routes(mode: str, text: str) -> list[str]:
    return expand(mode, parse_expression(text, CATALOG), CATALOG)


def ok(ms: float) -> Outcome:
    return Outcome(ok=True, median_ms=ms)


FAILED = Outcome(ok=False, median_ms=None)


# --- fast and full -----------------------------------------------------------------------------


def test_modes() -> None:
    assert MODES == ("adaptive", "fast", "full", "mixed")


def test_three_on_off_knobs_fast_is_baseline_then_one_knob_at_a_time() -> None:
    assert routes("fast", THREE_ON_OFF) == ["", LONG_W, RAGGED, COPY]


def test_three_on_off_knobs_full_is_eight_routes_last_knob_fastest() -> None:
    # (long_w, ragged, copy) in product order, each canonicalized (defaults dropped, names sorted).
    assert routes("full", THREE_ON_OFF) == [
        RAGGED,  # on on on
        f"{COPY} {RAGGED}",  # on on off
        "",  # on off on
        COPY,  # on off off
        f"{LONG_W} {RAGGED}",  # off on on
        f"{LONG_W} {COPY} {RAGGED}",  # off on off
        LONG_W,  # off off on
        f"{LONG_W} {COPY}",  # off off off
    ]


def test_three_valued_knob() -> None:
    text = "-kgen:codegen:cuda_tile=[0|1|2]"
    assert routes("fast", text) == ["", "-kgen:codegen:cuda_tile=0", "-kgen:codegen:cuda_tile=2"]
    assert routes("full", text) == ["-kgen:codegen:cuda_tile=0", "", "-kgen:codegen:cuda_tile=2"]


def test_fast_baseline_uses_catalog_default_even_when_not_listed() -> None:
    text = "-kgen:codegen:cuda_tile=[2|3]"
    assert routes("fast", text) == ["", "-kgen:codegen:cuda_tile=2", "-kgen:codegen:cuda_tile=3"]
    assert routes("full", text) == ["-kgen:codegen:cuda_tile=2", "-kgen:codegen:cuda_tile=3"]


def test_pinned_tokens_apply_to_every_route() -> None:
    text = "-slice_fusion=off -conv_use_long_w=[on|off] -cask_fusion:num_tactics=[0|8]"
    pinned = "-slice_fusion=off"
    assert routes("fast", text) == [
        pinned,
        f"{LONG_W} {pinned}",
        f"-cask_fusion:num_tactics=8 {pinned}",
    ]
    full = routes("full", text)
    assert len(full) == 4
    assert all(route_dict(r)["-slice_fusion"] == "off" for r in full)


def test_pinned_at_default_collapses_into_the_default_route() -> None:
    assert routes("fast", "-slice_fusion=on -copy_ppg=[on|off]") == ["", COPY]


def test_no_varied_knob_gives_the_pinned_route_only() -> None:
    assert routes("fast", "-copy_ppg=off") == [COPY]
    assert routes("full", "-copy_ppg=off") == [COPY]
    assert routes("fast", "") == [""]


def test_static_next_batch_skips_known_and_candidates_keep_them() -> None:
    search = make_search("full", parse_expression(THREE_ON_OFF, CATALOG), CATALOG)
    known = {RAGGED: ok(1.0), "": FAILED}
    batch = search.next_batch(known)
    assert len(batch) == 6 and not set(batch) & set(known)
    assert search.candidates(known) == routes("full", THREE_ON_OFF)
    assert search.pending(known) is None
    assert search.next_batch({r: ok(1.0) for r in search.candidates({})}) == []


def test_unknown_mode_suggests_a_mode() -> None:
    with pytest.raises(RouteError) as info:
        make_search("ful", parse_expression(THREE_ON_OFF), CATALOG)
    assert "unknown search mode `ful`" in info.value.message
    assert info.value.hint is not None and "did you mean `full`?" in info.value.hint


def test_make_search_validates_against_catalog() -> None:
    expr = Expression((Token("-conv_use_lng_w", ("on", "off"), False),))
    with pytest.raises(RouteError, match="did you mean"):
        make_search("fast", expr, CATALOG)


def test_expand_refuses_mixed() -> None:
    with pytest.raises(RouteError) as info:
        routes("mixed", THREE_ON_OFF)
    assert "cannot be listed ahead of time" in info.value.message
    assert info.value.hint is not None and "`fast`" in info.value.hint


# --- mixed -------------------------------------------------------------------------------------

MIXED_TEXT = "-kgen:codegen:cuda_tile=[0|1|2] -conv_use_long_w=[on|off] -copy_ppg=[on|off]"
TILE0, TILE2 = "-kgen:codegen:cuda_tile=0", "-kgen:codegen:cuda_tile=2"


def mixed() -> MixedSearch:
    search = make_search("mixed", parse_expression(MIXED_TEXT, CATALOG), CATALOG)
    assert isinstance(search, MixedSearch)
    return search


def test_mixed_starts_with_fast_and_says_what_phase_2_waits_for() -> None:
    search = mixed()
    assert search.name == "mixed"
    assert search.next_batch({}) == ["", TILE0, TILE2, LONG_W, COPY]
    assert search.pending({}) == "mixed phase 2 waits for 5 phase-1 measurements"
    partial = {"": ok(10.0), TILE0: ok(9.0), TILE2: ok(9.0), LONG_W: ok(9.0)}
    assert search.next_batch(partial) == [COPY]
    assert search.pending(partial) == "mixed phase 2 waits for 1 phase-1 measurement"
    assert search.candidates(partial) == ["", TILE0, TILE2, LONG_W, COPY]


def test_mixed_phase_2_is_the_product_over_positive_knobs_without_phase_1_routes() -> None:
    search = mixed()
    # tile: 0 is slower but 2 is faster -> positive; long_w faster -> positive; copy ties -> not.
    known = {"": ok(10.0), TILE0: ok(11.0), TILE2: ok(9.0), LONG_W: ok(9.9), COPY: ok(10.0)}
    assert search.positives(known) == ["-kgen:codegen:cuda_tile", "-conv_use_long_w"]
    assert search.pending(known) is None
    # whole listed lists of the positive knobs (tile 0|1|2 x long_w on|off), copy at baseline,
    # last knob fastest, minus the four routes phase 1 already measured.
    assert search.next_batch(known) == [f"{LONG_W} {TILE0}", f"{LONG_W} {TILE2}"]
    phase1 = ["", TILE0, TILE2, LONG_W, COPY]
    assert search.candidates(known) == [*phase1, f"{LONG_W} {TILE0}", f"{LONG_W} {TILE2}"]
    done = {**known, f"{LONG_W} {TILE0}": ok(8.0), f"{LONG_W} {TILE2}": ok(8.5)}
    assert search.next_batch(done) == []


def test_mixed_strict_less_than_means_a_tie_is_not_positive() -> None:
    search = mixed()
    known = {"": ok(10.0), TILE0: ok(10.0), TILE2: ok(10.0), LONG_W: ok(10.0), COPY: ok(10.0)}
    assert search.positives(known) == []
    assert search.next_batch(known) == []


def test_mixed_one_positive_knob_gives_no_phase_2() -> None:
    search = mixed()
    known = {"": ok(10.0), TILE0: ok(12.0), TILE2: ok(12.0), LONG_W: ok(5.0), COPY: ok(10.5)}
    assert search.positives(known) == ["-conv_use_long_w"]
    assert search.next_batch(known) == []
    assert search.candidates(known) == ["", TILE0, TILE2, LONG_W, COPY]
    assert search.pending(known) is None


def test_mixed_three_positive_knobs_product_over_all_three() -> None:
    search = mixed()
    known = {"": ok(10.0), TILE0: ok(9.0), TILE2: ok(12.0), LONG_W: ok(9.0), COPY: ok(9.0)}
    assert search.positives(known) == ["-kgen:codegen:cuda_tile", "-conv_use_long_w", "-copy_ppg"]
    batch = search.next_batch(known)
    assert len(batch) == 3 * 2 * 2 - len(known)
    assert batch[0] == f"{COPY} {TILE0}"  # tile=0, long_w=on, copy=off: copy varies fastest
    assert not set(batch) & set(known)


def test_mixed_failed_routes_are_never_positive() -> None:
    search = mixed()
    known = {
        "": ok(10.0),
        TILE0: Outcome(ok=False, median_ms=1.0),  # fast but failed the accuracy gate
        TILE2: FAILED,
        LONG_W: ok(9.0),
        COPY: Outcome(ok=True, median_ms=None),
    }
    assert search.positives(known) == ["-conv_use_long_w"]
    assert search.next_batch(known) == []


def test_mixed_failed_baseline_makes_nothing_positive() -> None:
    search = mixed()
    known = {"": FAILED, TILE0: ok(1.0), TILE2: ok(1.0), LONG_W: ok(1.0), COPY: ok(1.0)}
    assert search.positives(known) == []
    assert search.next_batch(known) == []


def test_mixed_with_a_single_varied_knob_has_nothing_pending() -> None:
    search = make_search("mixed", parse_expression("-kgen:codegen:cuda_tile=[0|2]", CATALOG), CATALOG)
    assert search.next_batch({}) == ["", TILE0, TILE2]
    assert search.pending({}) is None


# --- properties --------------------------------------------------------------------------------


@st.composite
def expressions(draw: st.DrawFn) -> Expression:
    knobs = draw(st.lists(st.sampled_from(CATALOG.knobs), unique_by=lambda k: k.option))
    tokens = []
    for knob in knobs:
        pool = knob.values if knob.values is not None else tuple(str(n) for n in range(-2, 40))
        values = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=5, unique=True))
        pinned = draw(st.booleans())
        tokens.append(Token(knob.option, (values[0],) if pinned else tuple(values), pinned))
    return Expression(tuple(tokens))


def _non_default(token: Token) -> int:
    knob = CATALOG.get(token.option)
    assert knob is not None
    return sum(1 for v in token.values if v != knob.default)


@given(expressions())
def test_fast_size_is_one_plus_non_default_values(expr: Expression) -> None:
    fast = expand("fast", expr, CATALOG)
    assert len(fast) == 1 + sum(_non_default(t) for t in expr.varied)
    assert len(set(fast)) == len(fast)


@given(expressions())
def test_full_size_is_the_product_and_every_route_carries_the_pins(expr: Expression) -> None:
    full = expand("full", expr, CATALOG)
    assert len(full) == math.prod(len(t.values) for t in expr.varied)
    defaults = {k.option: k.default for k in CATALOG.knobs}
    pins = {o: v for o, v in expr.pinned.items() if v != defaults[o]}
    assert all(pins.items() <= route_dict(r).items() for r in full)


@given(expressions(), st.data())
def test_mixed_never_proposes_a_known_route(expr: Expression, data: st.DataObject) -> None:
    search = make_search("mixed", expr, CATALOG)
    known: dict[str, Outcome] = {}
    for _ in range(3):
        batch = search.next_batch(known)
        assert not set(batch) & set(known)
        assert len(set(batch)) == len(batch)
        for route in batch:
            known[route] = data.draw(st.builds(Outcome, st.booleans(), st.floats(1.0, 2.0)))
    assert search.next_batch(known) == []
    assert set(search.candidates(known)) == set(known)
