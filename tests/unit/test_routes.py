"""Tests for the tuning-expression grammar and canonical routes (trt_routes.routes)."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trt_routes.catalog import Catalog, Knob
from trt_routes.errors import RouteError
from trt_routes.routes import (
    Expression,
    Token,
    canonical,
    count_text,
    describe,
    parse_expression,
    parse_route,
    route_dict,
    validate_expression,
)

CATALOG = Catalog(
    backend="test",
    version="1",
    knobs=(
        Knob("-conv_use_long_w", ("on", "off"), "on"),
        Knob("-kgen:codegen:cuda_tile", ("0", "1", "2", "3"), "1"),
        Knob("-match_ragged_mha", ("on", "off"), "off"),
        Knob("-copy_ppg", ("on", "off"), "on"),
        Knob("-cask_fusion:num_tactics", None, "0"),
        Knob("-kgen:tiling", ("auto", "small", "large"), "auto"),
    ),
)


def error(text: str, catalog: Catalog | None = None, **kw: str) -> RouteError:
    with pytest.raises(RouteError) as info:
        parse_expression(text, catalog, **kw)
    return info.value


# --- parsing -----------------------------------------------------------------------------------


def test_parse_pinned_and_varied_tokens_in_order() -> None:
    expr = parse_expression("-conv_use_long_w=[on|off] -kgen:codegen:cuda_tile=2", CATALOG)
    assert expr.tokens == (
        Token("-conv_use_long_w", ("on", "off"), False),
        Token("-kgen:codegen:cuda_tile", ("2",), True),
    )
    assert expr.varied == (Token("-conv_use_long_w", ("on", "off"), False),)
    assert expr.pinned == {"-kgen:codegen:cuda_tile": "2"}


def test_text_round_trips_to_trtexec_form() -> None:
    text = "-conv_use_long_w=[on|off] -kgen:codegen:cuda_tile=[0|2|3] -copy_ppg=off"
    expr = parse_expression(text, CATALOG)
    assert expr.text() == text
    assert parse_expression(expr.text(), CATALOG) == expr


def test_file_form_one_token_per_line_with_comments_and_trimmed_values() -> None:
    text = """
    # knobs that matter for convolutions
    -conv_use_long_w=[ on | off ]
        # a comment indented
    -kgen:codegen:cuda_tile=[0|2]\t-copy_ppg=off
    """
    expr = parse_expression(text, CATALOG, source="routes.txt")
    assert expr.text() == "-conv_use_long_w=[on|off] -kgen:codegen:cuda_tile=[0|2] -copy_ppg=off"


def test_without_catalog_any_well_formed_token_parses() -> None:
    expr = parse_expression("-anything=[x|y] -other:ns=3")
    assert [t.option for t in expr.tokens] == ["-anything", "-other:ns"]


def test_empty_text_is_an_empty_expression() -> None:
    assert parse_expression("  \n# only a comment\n") == Expression(())


# --- grammar errors: each names the source and the token, and hints at the fix ----------------


@pytest.mark.parametrize(
    ("text", "what", "hint"),
    [
        ("conv_use_long_w=on", "does not start with `-`", "write `-conv_use_long_w=on`"),
        ("-conv_use_long_w", "has no `=value`", "`-conv_use_long_w=VALUE`"),
        ("-=on", "has no knob name", "-knob=value"),
        ("-conv_use_long_w=", "has an empty value", "no space after `=`"),
        ("-conv_use_long_w=[on|off", "unbalanced brackets", "one `]` at the end"),
        ("-conv_use_long_w=on|off]", "unbalanced brackets", "one `[` right after `=`"),
        ("-conv_use_long_w=[on]off", "unbalanced brackets", "-conv_use_long_w=[a|b]"),
        ("-conv_use_long_w=[[on|off]]", "unbalanced brackets", "-conv_use_long_w=[a|b]"),
        ("-conv_use_long_w=[]", "empty list `[]`", "list at least one value"),
        ("-conv_use_long_w=[ ]", "empty list `[]`", "pin it with `-conv_use_long_w=value`"),
        ("-conv_use_long_w=[on||off]", "empty item", "remove the extra `|`"),
        ("-conv_use_long_w=[on|off|]", "empty item", "remove the extra `|`"),
        ("-conv_use_long_w=on|off", "without brackets", "write `-conv_use_long_w=[on|off]`"),
        ("-conv_use_long_w=[on|off|on]", "lists the value `on` twice", "remove the repeated value"),
        ("-conv_use_long_w=[o n|off]", "contains a space", "separate list items with `|`"),
    ],
)
def test_malformed_tokens(text: str, what: str, hint: str) -> None:
    err = error(text, source="tuning.yaml")
    assert err.message.startswith("tuning.yaml: ")
    assert f"`{text}`" in err.message
    assert what in err.message
    assert err.hint is not None and hint in err.hint


def test_unbalanced_list_does_not_swallow_the_next_token() -> None:
    err = error("-conv_use_long_w=[on|off -copy_ppg=on")
    assert "`-conv_use_long_w=[on|off`" in err.message


def test_error_in_file_form_names_the_line() -> None:
    err = error("-conv_use_long_w=on\n# comment\n-copy_ppg\n", CATALOG, source="routes.txt")
    assert err.message.startswith("routes.txt:3: ")


def test_duplicate_knob_names_both_tokens() -> None:
    err = error("-conv_use_long_w=on -copy_ppg=off -conv_use_long_w=[on|off]")
    assert "`-conv_use_long_w` appears twice" in err.message
    assert "`-conv_use_long_w=on`" in err.message and "`-conv_use_long_w=[on|off]`" in err.message
    assert err.hint is not None and "one token per knob" in err.hint


def test_wildcard_is_not_grammar() -> None:
    err = error("-kgen:codegen:cuda_tile=*", CATALOG)
    assert "wildcard" in err.message and "no wildcards" in err.message
    assert err.hint is not None and "-kgen:codegen:cuda_tile=[0|1|2|3]" in err.hint


def test_wildcard_in_knob_name_is_not_grammar() -> None:
    err = error("-kgen:*=1")
    assert "wildcard in the knob name" in err.message
    assert err.hint is not None and "trt-routes knobs" in err.hint


def test_range_is_not_grammar_and_hint_spells_the_list() -> None:
    err = error("-kgen:codegen:cuda_tile=[0..3]")
    assert "range `..`" in err.message and "no ranges" in err.message
    assert err.hint is not None and "`-kgen:codegen:cuda_tile=[0|1|2|3]`" in err.hint


def test_huge_range_hint_does_not_enumerate() -> None:
    err = error("-cask_fusion:num_tactics=1..1000")
    assert err.hint is not None and "[1|1000]" in err.hint


# --- catalog errors ----------------------------------------------------------------------------


def test_unknown_knob_suggests_close_name() -> None:
    err = error("-conv_use_lng_w=on", CATALOG, source="job resnet")
    assert err.message.startswith("job resnet: ")
    assert "unknown knob `-conv_use_lng_w`" in err.message
    assert err.hint == "did you mean `-conv_use_long_w`?"


def test_unknown_knob_without_close_name_points_at_knobs_command() -> None:
    err = error("-zzzzzz=1", CATALOG)
    assert "unknown knob `-zzzzzz`" in err.message
    assert err.hint == "run `trt-routes knobs` to list them"


def test_value_not_allowed_lists_allowed_values() -> None:
    err = error("-kgen:tiling=[auto|huge]", CATALOG)
    assert "value `huge` is not allowed for `-kgen:tiling`" in err.message
    assert "`-kgen:tiling=[auto|huge]`" in err.message
    assert err.hint is not None and "auto, small, large" in err.hint


def test_values_are_case_sensitive() -> None:
    err = error("-conv_use_long_w=ON", CATALOG)
    assert "`ON` is not allowed" in err.message


def test_open_integer_knob_rejects_non_integer() -> None:
    err = error("-cask_fusion:num_tactics=many", CATALOG)
    assert "open integer knob" in err.message and "`many` is not an integer" in err.message
    assert err.hint is not None and "-cask_fusion:num_tactics=0" in err.hint


def test_open_integer_knob_accepts_a_list_of_integers() -> None:
    expr = parse_expression("-cask_fusion:num_tactics=[4|8|+16]", CATALOG)
    assert expr.varied == (Token("-cask_fusion:num_tactics", ("4", "8", "16"), False),)


def test_open_integer_list_rejects_non_integer_items() -> None:
    err = error("-cask_fusion:num_tactics=[4|x]", CATALOG)
    assert "`x` is not an integer" in err.message


def test_open_integer_values_equal_as_numbers_are_duplicates() -> None:
    err = error("-cask_fusion:num_tactics=[8|08]", CATALOG)
    assert "lists the value `8` twice" in err.message


def test_open_knobs_of_other_types_take_their_values_from_the_catalog_s_type_word() -> None:
    """TensorRT's catalog writes an open knob's type after ``=`` (``=int32_t``, ``=int``); a float or another
    type word is read as such (trt_routes.backends.tensorrt.catalog.open_type), and the grammar follows it:
    floats are normalized (``1e-3`` and ``0.001`` are one route), other types take one plain token."""
    from trt_routes.backends.tensorrt.catalog import open_type, read_catalog

    assert [open_type(t) for t in ("-k=int32_t", "-k=int", "-k", "-k=[...]", "-k=float", "-k=double", "-k=str")] \
        == ["int", "int", "int", "int", "float", "float", "text"]
    catalog = read_catalog(json.dumps({"tuner_version": "x", "tuner_options": [
        {"option": "-ratio", "allowed_values": "-ratio=float", "default_value": "0.5"},
        {"option": "-mode", "allowed_values": "-mode=string", "default_value": "auto"},
        {"option": "-n", "allowed_values": "-n=int32_t", "default_value": "4"}]}), version="11.4").catalog
    expr = parse_expression("-ratio=[1e-3|0.25] -mode=[fast|auto] -n=[2|8]", catalog)
    assert expr.varied == (Token("-ratio", ("0.001", "0.25"), False), Token("-mode", ("fast", "auto"), False),
                           Token("-n", ("2", "8"), False))
    assert "open float knob and `x` is not a finite number" in error("-ratio=x", catalog).message
    assert "lists the value `0.001` twice" in error("-ratio=[0.001|1e-3]", catalog).message
    assert "open integer knob" in error("-n=1.5", catalog).message
    assert catalog.get("-mode") is not None and catalog.get("-mode").allowed_text() == "-mode=text"  # type: ignore[union-attr]
    plain = read_catalog(json.dumps({"tuner_version": "x", "tuner_options": [
        {"option": "-n", "allowed_values": "-n=int32_t", "default_value": "4"}]}), version="11.4").catalog
    assert plain.digest == Catalog(plain.backend, plain.version, (Knob("-n", None, "4"),),
                                   plain.tuner_version).digest  # integer knobs' digests did not change


def test_validate_expression_checks_programmatic_expressions() -> None:
    good = Expression((Token("-copy_ppg", ("off",), True),))
    validate_expression(good, CATALOG)
    bad = Expression((Token("-copy_ppg", ("maybe",), True),))
    with pytest.raises(RouteError, match=r"manifest: .*`maybe` is not allowed"):
        validate_expression(bad, CATALOG, source="manifest")
    twice = Expression((Token("-copy_ppg", ("off",), True), Token("-copy_ppg", ("on", "off"), False)))
    with pytest.raises(RouteError, match="appears twice"):
        validate_expression(twice, CATALOG)
    empty = Expression((Token("-copy_ppg", (), False),))
    with pytest.raises(RouteError, match="has 0 values"):
        validate_expression(empty, CATALOG)


# --- routes ------------------------------------------------------------------------------------


def test_parse_route_returns_assignment() -> None:
    route = parse_route("-kgen:codegen:cuda_tile=2  -conv_use_long_w=off", CATALOG)
    assert route == {"-kgen:codegen:cuda_tile": "2", "-conv_use_long_w": "off"}


def test_parse_route_rejects_bracket_list() -> None:
    with pytest.raises(RouteError) as info:
        parse_route("-conv_use_long_w=[on|off]", CATALOG, source="tuning.lock")
    err = info.value
    assert err.message.startswith("tuning.lock: ")
    assert "`-conv_use_long_w=[on|off]` is a list" in err.message
    assert err.hint is not None and "`-conv_use_long_w=on`" in err.hint


def test_parse_route_checks_catalog_and_duplicates() -> None:
    with pytest.raises(RouteError, match="did you mean"):
        parse_route("-copy_pg=on", CATALOG)
    with pytest.raises(RouteError, match="appears twice"):
        parse_route("-copy_ppg=on -copy_ppg=off")


def test_default_route_spellings() -> None:
    assert parse_route("") == {}
    assert parse_route("default") == {}
    assert describe("") == "default"
    assert describe("-copy_ppg=off") == "-copy_ppg=off"


def test_canonical_drops_defaults_and_sorts() -> None:
    assign = {"-kgen:codegen:cuda_tile": "2", "-copy_ppg": "on", "-conv_use_long_w": "off"}
    assert canonical(assign, CATALOG) == "-conv_use_long_w=off -kgen:codegen:cuda_tile=2"


def test_canonical_of_all_defaults_is_the_empty_route() -> None:
    assert canonical({"-copy_ppg": "on", "-cask_fusion:num_tactics": "00"}, CATALOG) == ""
    assert canonical({}, CATALOG) == ""


def test_canonical_normalizes_open_integers() -> None:
    assert canonical({"-cask_fusion:num_tactics": " +08"}, CATALOG) == "-cask_fusion:num_tactics=8"


def test_canonical_rejects_unknown_knob_and_bad_value() -> None:
    with pytest.raises(RouteError, match="unknown knob `-nope`"):
        canonical({"-nope": "1"}, CATALOG)
    with pytest.raises(RouteError) as info:
        canonical({"-kgen:codegen:cuda_tile": "9"}, CATALOG)
    assert info.value.hint is not None and "0, 1, 2, 3" in info.value.hint


def test_route_dict_reads_canonical_routes_back() -> None:
    route = "-conv_use_long_w=off -kgen:codegen:cuda_tile=2"
    assert route_dict(route) == {"-conv_use_long_w": "off", "-kgen:codegen:cuda_tile": "2"}
    assert route_dict("") == {}


# --- properties --------------------------------------------------------------------------------


def _value_for(knob: Knob) -> st.SearchStrategy[str]:
    if knob.values is None:
        return st.integers(-5, 300).map(str)
    return st.sampled_from(knob.values)


assignments = st.lists(st.sampled_from(CATALOG.knobs), unique_by=lambda k: k.option).flatmap(
    lambda knobs: st.tuples(*(st.tuples(st.just(k.option), _value_for(k)) for k in knobs))
)


@given(assignments)
def test_canonical_is_idempotent(pairs: tuple[tuple[str, str], ...]) -> None:
    route = canonical(dict(pairs), CATALOG)
    assert canonical(route_dict(route), CATALOG) == route
    assert parse_route(route, CATALOG) == route_dict(route)


@given(assignments, st.randoms(use_true_random=False))
def test_canonical_ignores_key_order(pairs: tuple[tuple[str, str], ...], rnd: random.Random) -> None:
    shuffled = list(pairs)
    rnd.shuffle(shuffled)
    assert canonical(dict(shuffled), CATALOG) == canonical(dict(pairs), CATALOG)


@given(assignments)
def test_canonical_keeps_exactly_the_non_default_knobs(pairs: tuple[tuple[str, str], ...]) -> None:
    kept = route_dict(canonical(dict(pairs), CATALOG))
    for option, value in pairs:
        knob = CATALOG.get(option)
        assert knob is not None
        is_default = int(value) == int(knob.default) if knob.is_open else value == knob.default
        assert (option in kept) is not is_default


@pytest.mark.parametrize(("n", "text"), [(0, "0"), (1_638, "1,638"), (9_999_999, "9,999,999"),
                                         (10_000_000, "1.00e+7"), (3**200, "2.66e+95"), (3**1000, "1.32e+477")])
def test_counts_are_written_short_even_beyond_what_a_float_holds(n: int, text: str) -> None:
    assert count_text(n) == text


@given(st.integers(min_value=10_000_000, max_value=10**600))
def test_a_short_count_is_the_count_rounded_to_three_digits(n: int) -> None:
    mantissa, exp = count_text(n).split("e+")
    lead = int(mantissa.replace(".", ""))  # three digits, 100-999
    assert 100 <= lead <= 999 and abs(lead * 10 ** (int(exp) - 2) - n) * 2 <= 10 ** (int(exp) - 2)
