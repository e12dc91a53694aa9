"""Accuracy losses against hand-computed values, NaN handling, and bootstrap timing statistics."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from trt_routes.canonical import l0_key
from trt_routes.evidence.measure import (
    METRICS,
    TimingStats,
    _block_bootstrap_medians,
    _block_counts,
    _multiset_medians,
    all_finite,
    loss,
    losses,
    timing_stats,
)

OUT = np.array([1.0, 2.0, 3.0, 4.0])
REF = np.array([1.0, 2.0, 2.0, 6.0])  # |diff| = [0, 0, 1, 2]


@pytest.mark.parametrize(
    ("metric", "expected"),
    [("l0", 2 / 4), ("l1", (0 + 0 + 1 + 2) / 4), ("l2", (0 + 0 + 1 + 4) / 4), ("lInf", 2.0)],
)
def test_elementwise_metrics(metric: str, expected: float) -> None:
    assert loss(metric, OUT, REF) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [([1.0, 0.0], [0.0, 1.0], 1.0),  # orthogonal
     ([1.0, 0.0], [1.0, 1.0], 1.0 - 1.0 / math.sqrt(2.0)),  # 45 degrees
     ([1.0, 2.0], [-1.0, -2.0], 2.0),  # opposite
     ([3.0, 4.0], [6.0, 8.0], 0.0)],  # same direction, other length
)
def test_cosine(a: list[float], b: list[float], expected: float) -> None:
    assert loss("cos", np.array(a), np.array(b)) == pytest.approx(expected, abs=1e-12)


def test_cosine_flattens_multi_dimensional_arrays() -> None:
    a = np.array([[1.0, 0.0], [0.0, 0.0]])
    b = np.array([[0.0, 0.0], [0.0, 1.0]])
    assert loss("cos", a, b) == pytest.approx(1.0)


def test_cosine_with_zero_norms() -> None:
    zeros = np.zeros(3)
    assert loss("cos", zeros, zeros) == 0.0  # both all-zero: they agree
    assert loss("cos", zeros, np.array([1.0, 2.0, 3.0])) == 1.0
    assert loss("cos", np.array([1.0, 2.0, 3.0]), zeros) == 1.0
    assert loss("cos", np.array([1e-14, 0.0]), np.array([1.0, 0.0])) == 1.0  # below 1e-12 counts as zero


def test_cosine_does_not_overflow() -> None:
    big = np.array([1e200, 2e200])
    assert loss("cos", big, big * 3) == pytest.approx(0.0, abs=1e-12)
    assert loss("cos", big, np.array([2e200, -1e200])) == pytest.approx(1.0)


def test_l0_atol_and_rtol() -> None:
    ref = np.array([10.0, 100.0, 0.0])
    out = np.array([10.5, 101.0, 0.05])  # |diff| = [0.5, 1, 0.05]
    # bounds atol + rtol*|r| = [0.2, 1.1, 0.1]: only the first element is beyond
    assert loss("l0", out, ref, atol=0.1, rtol=0.01) == pytest.approx(1 / 3)
    assert loss("l0", out, ref, atol=0.0, rtol=0.0) == 1.0
    assert loss("l0", out, ref, atol=1.0, rtol=0.0) == 0.0  # 1.0 is not beyond 1.0: strict '>'
    assert loss("l0", out, ref, atol=0.0, rtol=0.02) == pytest.approx(2 / 3)  # bounds [0.2, 2, 0]


def test_defaults_for_l0_are_1e5() -> None:
    ref = np.array([1.0, 1.0])
    out = np.array([1.0 + 1.5e-5, 1.0 + 3e-5])  # bound 1e-5 + 1e-5*1 = 2e-5
    assert loss("l0", out, ref) == 0.5


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_output_is_infinite_loss(metric: str, bad: float) -> None:
    out = np.array([1.0, bad, 3.0], dtype=np.float32)
    assert loss(metric, out, np.array([1.0, 2.0, 3.0])) == math.inf


def test_computes_in_float64() -> None:
    out = np.array([1e20], dtype=np.float32)  # its square overflows float32
    ref = np.array([0.0], dtype=np.float32)
    assert loss("l2", out, ref) == pytest.approx(float(np.float32(1e20)) ** 2)
    assert loss("l1", np.array([1, 2], dtype=np.int64), np.array([1.5, 2.0])) == pytest.approx(0.25)
    half = np.array([1.0, 2.0], dtype=np.float16)
    assert loss("lInf", half, half.astype(np.float64) + 0.5) == 0.5


def test_shape_mismatch_names_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"):
        loss("l1", np.zeros((2, 3)), np.zeros((3, 2)))


def test_unknown_metric_and_bad_reference() -> None:
    with pytest.raises(ValueError, match="l3"):
        loss("l3", OUT, REF)
    with pytest.raises(ValueError, match="reference"):
        loss("l1", OUT, np.array([1.0, math.nan, 0.0, 0.0]))


def test_empty_arrays_have_no_loss() -> None:
    for metric in METRICS:
        assert loss(metric, np.zeros((0, 3)), np.zeros((0, 3))) == 0.0


def test_losses_per_output_and_metric() -> None:
    params = ((1e-5, 1e-5), (0.5, 0.0))
    got = losses({"y": OUT, "z": np.array([3.0, 4.0]), "extra": np.zeros(1)},
                 {"y": REF, "z": np.array([6.0, 8.0])}, params)
    assert set(got) == {"y", "z"}  # outputs without a reference are not judged
    assert set(got["y"]) == {"l1", "l2", "lInf", "cos", l0_key(1e-5, 1e-5), l0_key(0.5, 0.0)}
    assert got["y"]["l1"] == pytest.approx(0.75)
    assert got["y"]["l2"] == pytest.approx(1.25)
    assert got["y"]["lInf"] == 2.0
    assert got["y"][l0_key(1e-5, 1e-5)] == 0.5
    assert got["y"][l0_key(0.5, 0.0)] == 0.5  # diffs 1 and 2 exceed 0.5
    assert got["z"]["cos"] == pytest.approx(0.0, abs=1e-12)
    assert got["z"]["l1"] == pytest.approx(3.5)
    # the same values as loss() one at a time
    assert got["y"]["cos"] == loss("cos", OUT, REF)


def test_losses_default_l0_key_matches_the_schema() -> None:
    got = losses({"y": OUT}, {"y": REF})
    assert got["y"]["l0@atol=1e-05,rtol=1e-05"] == 0.5


def test_losses_non_finite_output_is_infinite_everywhere() -> None:
    got = losses({"y": np.array([math.nan, 1.0])}, {"y": np.array([0.0, 1.0])}, [(0.1, 0.1)])
    assert got["y"] and all(v == math.inf for v in got["y"].values())


def test_losses_missing_output_and_shape_mismatch_name_the_output() -> None:
    with pytest.raises(ValueError, match="'logits'"):
        losses({"y": OUT}, {"y": REF, "logits": REF})
    with pytest.raises(ValueError, match=r"'y'.*\(4,\).*\(2, 2\)"):
        losses({"y": OUT}, {"y": REF.reshape(2, 2)})


def test_all_finite_lists_the_bad_outputs() -> None:
    outputs = {"a": np.ones(3), "b": np.array([1.0, math.nan]), "c": np.array([math.inf]),
               "d": np.arange(4, dtype=np.int32)}
    assert all_finite(outputs) == ["b", "c"]
    assert all_finite({"a": np.ones(2)}) == []


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(dtype=st.sampled_from([np.float64, np.float32, np.float16]),
                  shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=6),
                  elements={"allow_nan": False, "allow_infinity": False}))
def test_every_loss_of_an_array_against_itself_is_zero(a: np.ndarray) -> None:
    for metric in ("l0", "l1", "l2", "lInf"):
        assert loss(metric, a, a.copy()) == 0.0
    assert loss("cos", a, a.copy()) == pytest.approx(0.0, abs=1e-9)
    row = losses({"o": a}, {"o": a}, [(0.0, 0.0)])["o"]
    assert all(v == pytest.approx(0.0, abs=1e-9) for v in row.values())


# --- timing --------------------------------------------------------------------------------


SAMPLES = [float(v) for v in np.random.default_rng(42).lognormal(mean=0.0, sigma=0.3, size=60)]


def test_timing_summary_matches_statistics_module() -> None:
    stats = timing_stats(SAMPLES)
    assert isinstance(stats, TimingStats)
    assert stats.n == 60
    assert stats.median == pytest.approx(statistics.median(SAMPLES))
    assert stats.mean == pytest.approx(statistics.fmean(SAMPLES))
    assert stats.stdev == pytest.approx(statistics.stdev(SAMPLES))
    assert stats.min == min(SAMPLES)


def test_bootstrap_interval_contains_the_median_and_is_seeded() -> None:
    stats = timing_stats(SAMPLES, seed=3)
    assert stats.ci_low <= stats.median <= stats.ci_high
    assert stats.ci_low < stats.ci_high
    assert min(SAMPLES) <= stats.ci_low and stats.ci_high <= max(SAMPLES)
    assert timing_stats(SAMPLES, seed=3) == stats
    assert timing_stats(list(reversed(SAMPLES)), seed=3).median == stats.median
    other = timing_stats(SAMPLES, seed=4)
    assert (other.ci_low, other.ci_high) != (stats.ci_low, stats.ci_high)


def test_lower_confidence_gives_a_narrower_interval() -> None:
    wide = timing_stats(SAMPLES, confidence=0.99)
    narrow = timing_stats(SAMPLES, confidence=0.5)
    assert wide.ci_low <= narrow.ci_low <= narrow.ci_high <= wide.ci_high
    assert narrow.ci_high - narrow.ci_low < wide.ci_high - wide.ci_low


def test_interval_narrows_with_more_samples() -> None:
    rng = np.random.default_rng(0)
    few = timing_stats(list(rng.normal(10.0, 1.0, size=10)))
    many = timing_stats(list(rng.normal(10.0, 1.0, size=1000)))
    assert many.ci_high - many.ci_low < few.ci_high - few.ci_low


def test_single_and_constant_samples() -> None:
    one = timing_stats([2.5])
    assert (one.n, one.stdev) == (1, 0.0)
    assert one.median == one.mean == one.ci_low == one.ci_high == one.min == 2.5
    flat = timing_stats([4.0] * 7)
    assert (flat.ci_low, flat.ci_high, flat.stdev) == (4.0, 4.0, 0.0)


@pytest.mark.parametrize(
    ("samples", "kwargs"),
    [([], {}), ([1.0, math.nan], {}), ([1.0, 2.0], {"confidence": 1.0}), ([1.0, 2.0], {"resamples": 0})],
)
def test_timing_stats_rejects_bad_input(samples: list[float], kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        timing_stats(samples, **kwargs)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(blocks=hnp.arrays(np.float64, st.tuples(st.integers(1, 17), st.integers(1, 9)),
                         elements=st.floats(0.0, 10.0).map(lambda v: round(v, 1))),  # rounded: many ties
       seed=st.integers(0, 2**16))
def test_multiset_medians_equal_numpy_medians_of_the_concatenated_blocks(blocks: np.ndarray, seed: int) -> None:
    """The block bootstrap takes each resample's median by rank over the sorted samples; it must be
    exactly numpy's median of the resample's blocks laid end to end."""
    multisets = np.sort(np.random.default_rng(seed).integers(0, len(blocks), size=(20, len(blocks))), axis=1)
    expected = [np.median(blocks[m].ravel()) for m in multisets]
    assert _multiset_medians(blocks, _block_counts(multisets, len(blocks))).tolist() == expected
    draws = np.random.default_rng(seed).integers(0, len(blocks), size=(50, len(blocks)))  # the same draws
    assert _block_bootstrap_medians(blocks, 50, seed).tolist() == [np.median(blocks[d].ravel()) for d in draws]
