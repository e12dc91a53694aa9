"""Accuracy losses (trtexec's metrics, but NaN-safe) and timing statistics with bootstrap intervals.

Pure numpy: no backend is imported here."""

from __future__ import annotations

__all__ = ["METRICS", "TimingStats", "all_finite", "loss", "losses", "timing_stats"]

import functools
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trt_routes.canonical import l0_key

METRICS = ("l0", "l1", "l2", "lInf", "cos")
ZERO_NORM = 1e-12
"""Below this L2 norm an array counts as all zeros for ``cos``: two such arrays agree (loss 0.0);
one such array against a non-zero one has no direction to compare (loss 1.0, as in trtexec)."""
_BOOTSTRAP_CHUNK = 4_000_000  # resampled elements held at once


def loss(metric: str, output: np.ndarray, reference: np.ndarray, *, atol: float = 1e-5,
         rtol: float = 1e-5) -> float:
    """One accuracy loss of ``output`` against ``reference``; lower is better.

    ``l0``: fraction of elements with |a-r| > atol + rtol*|r|; ``l1``: mean |a-r|; ``l2``: mean
    (a-r)^2; ``lInf``: max |a-r|; ``cos``: 1 - cosine similarity of the flattened arrays (see
    ``ZERO_NORM``). Computed in float64. A NaN or Inf anywhere in ``output`` gives ``math.inf``
    for every metric. Empty arrays give 0.0. Raises ValueError on a shape mismatch, an unknown
    metric, or a non-finite reference (nothing can be judged against it)."""
    if metric not in METRICS:
        raise ValueError(f"unknown accuracy metric {metric!r}; use one of {', '.join(METRICS)}")
    out, ref = _pair(output, reference)
    if not np.isfinite(out).all():
        return math.inf
    return _loss(metric, out, ref, atol, rtol)


def losses(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
           l0_params: Iterable[tuple[float, float]] = ((1e-5, 1e-5),)) -> dict[str, dict[str, float]]:
    """Every loss for every reference output: ``{name: {"l1": .., "l2": .., "lInf": .., "cos": ..,
    "l0@atol=1e-05,rtol=1e-05": ..}}``, one l0 key per (atol, rtol) pair (see ``canonical.l0_key``).

    Outputs without a reference are ignored; a reference without an output raises ValueError."""
    params = list(dict.fromkeys((float(a), float(r)) for a, r in l0_params))
    missing = [name for name in reference if name not in outputs]
    if missing:
        raise ValueError(f"no output named {', '.join(map(repr, missing))} "
                         f"(outputs: {', '.join(map(repr, outputs)) or 'none'})")
    result: dict[str, dict[str, float]] = {}
    for name, ref_array in reference.items():
        try:
            out, ref = _pair(outputs[name], ref_array)
        except ValueError as exc:
            raise ValueError(f"output {name!r}: {exc}") from None
        row: dict[str, float] = {}
        finite = bool(np.isfinite(out).all())
        for metric in ("l1", "l2", "lInf", "cos"):
            row[metric] = _loss(metric, out, ref, 0.0, 0.0) if finite else math.inf
        for atol, rtol in params:
            row[l0_key(atol, rtol)] = _loss("l0", out, ref, atol, rtol) if finite else math.inf
        result[name] = row
    return result


def all_finite(outputs: Mapping[str, np.ndarray]) -> list[str]:
    """The names of the outputs that hold a NaN or an Inf (empty when every output is finite)."""
    return [name for name, array in outputs.items() if not np.isfinite(np.asarray(array)).all()]


def _pair(output: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = np.asarray(output)
    ref = np.asarray(reference)
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: output {out.shape} vs reference {ref.shape}")
    ref64 = ref.astype(np.float64, copy=False)
    if not np.isfinite(ref64).all():
        raise ValueError("the reference holds NaN or Inf values; no output can be judged against it")
    return out.astype(np.float64, copy=False), ref64


def _loss(metric: str, out: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> float:
    """``metric`` on float64 arrays of one shape, ``out`` finite."""
    if out.size == 0:
        return 0.0
    if metric == "cos":
        return _cosine_loss(out.ravel(), ref.ravel())
    diff = np.abs(out - ref)
    if metric == "l0":
        return float(np.count_nonzero(diff > atol + rtol * np.abs(ref)) / diff.size)
    if metric == "l1":
        return float(diff.mean())
    if metric == "l2":
        return float(np.mean(diff * diff))
    return float(diff.max())


def _cosine_loss(a: np.ndarray, b: np.ndarray) -> float:
    # Scale by the largest magnitude first so that the dot product and norms cannot overflow.
    scale_a, scale_b = float(np.abs(a).max()), float(np.abs(b).max())
    a_unit = a / scale_a if scale_a > 0 else a
    b_unit = b / scale_b if scale_b > 0 else b
    unit_norm_a, unit_norm_b = float(np.linalg.norm(a_unit)), float(np.linalg.norm(b_unit))
    small_a, small_b = unit_norm_a * scale_a < ZERO_NORM, unit_norm_b * scale_b < ZERO_NORM
    if small_a or small_b:
        return 0.0 if small_a and small_b else 1.0
    similarity = float(np.dot(a_unit, b_unit)) / (unit_norm_a * unit_norm_b)
    return 1.0 - min(1.0, max(-1.0, similarity))


@dataclass(frozen=True)
class TimingStats:
    """Summary of timing samples (same unit as the samples); ``ci_*`` bound the median."""

    n: int
    median: float
    mean: float
    stdev: float
    ci_low: float
    ci_high: float
    min: float


def timing_stats(samples: Sequence[float], *, confidence: float = 0.95, resamples: int = 500,
                 seed: int = 0, block: int = 0) -> TimingStats:
    """Median, mean, sample standard deviation and a bootstrap percentile interval of the median. The
    interval is widened, if need be, to contain the sample median itself (resampling noise can leave
    it a hair outside). Raises ValueError on empty or non-finite samples.

    ``block``: the samples come in consecutive runs of that many (the protocol's repeats of
    ``iterations`` timed runs); whole runs are resampled (a block bootstrap), so the interval also
    covers how much repeats differ from each other (drift, sessions of a launch-bound route), which
    resampling single samples as if independent would hide. Needs at least two whole blocks. With
    few blocks (no more distinct resamples than ``resamples``, i.e. up to 6) the interval comes from
    the exact bootstrap distribution; otherwise from ``resamples`` draws seeded by ``seed``."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("no timing samples")
    xs = np.sort(x)  # -Inf sorts first, +Inf and NaN last: the ends tell whether all are finite
    if not (math.isfinite(xs[0]) and math.isfinite(xs[-1])):
        raise ValueError("timing samples hold NaN or Inf values")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    n = int(x.size)
    median = float((xs[(n - 1) // 2] + xs[n // 2]) / 2.0)  # numpy's median, from the sorted samples
    if n == 1:
        low = high = median
    else:
        blocks = n // block if block > 0 else 0
        tail = (1.0 - confidence) / 2.0
        if blocks >= 2 and math.comb(2 * blocks - 1, blocks) <= resamples:
            low, high = _exact_block_interval(x[: blocks * block].reshape(blocks, block), tail)
        else:
            medians = (_block_bootstrap_medians(x[: blocks * block].reshape(blocks, block), resamples, seed)
                       if blocks >= 2 else _bootstrap_medians(x, resamples, seed))
            low, high = (float(v) for v in np.quantile(medians, [tail, 1.0 - tail]))
    return TimingStats(
        n=n,
        median=median,
        mean=float(x.mean()),
        stdev=float(x.std(ddof=1)) if n > 1 else 0.0,
        ci_low=min(low, median),
        ci_high=max(high, median),
        min=float(xs[0]),
    )


@functools.lru_cache(maxsize=8)
def _all_multisets(nb: int) -> tuple[np.ndarray, np.ndarray]:
    """Every multiset of ``nb`` blocks drawn from ``nb`` (as block counts) and its probability under
    resampling with replacement: nb! / (prod count! * nb**nb)."""
    rows = np.array(list(itertools.combinations_with_replacement(range(nb), nb)), dtype=np.int64)
    counts = _block_counts(rows, nb)
    log_p = math.lgamma(nb + 1) - np.vectorize(math.lgamma)(counts + 1.0).sum(axis=1) - nb * math.log(nb)
    return counts, np.exp(log_p)


def _exact_block_interval(blocks: np.ndarray, tail: float) -> tuple[float, float]:
    """The block bootstrap's percentile interval from its exact distribution: every distinct resample
    weighted by its probability (no resampling noise), used when there are no more of them than draws."""
    counts, p = _all_multisets(len(blocks))
    medians = _multiset_medians(blocks, counts)
    order = np.argsort(medians, kind="stable")
    cdf = np.cumsum(p[order])
    low, high = np.searchsorted(cdf, [tail - 1e-12, 1.0 - tail - 1e-12]).clip(0, len(cdf) - 1)  # F >= q
    return float(medians[order[low]]), float(medians[order[high]])


def _block_bootstrap_medians(blocks: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Medians of ``resamples`` seeded resamples of whole rows of ``blocks``.

    A resample's median depends only on how often it holds each block, not on their order: with few
    blocks (the protocol's repeats) most resamples repeat one of a handful of multisets, so each
    distinct multiset's median is taken once, by rank over the samples sorted once."""
    rng = np.random.default_rng(seed)
    nb, size = blocks.shape
    rows = max(1, _BOOTSTRAP_CHUNK // (nb * size))
    parts = []
    for start in range(0, resamples, rows):
        pick = rng.integers(0, nb, size=(min(rows, resamples - start), nb))
        pick.sort(axis=1)
        if nb < 16:  # each sorted row as one integer (base nb), so finding the distinct ones is 1-D
            _, first, inverse = np.unique(pick @ (nb ** np.arange(nb, dtype=np.int64)), return_index=True,
                                          return_inverse=True)
            uniq = pick[first]
        else:
            uniq, inverse = np.unique(pick, axis=0, return_inverse=True)
        parts.append(_multiset_medians(blocks, _block_counts(uniq, nb))[inverse.ravel()])
    return np.concatenate(parts)


def _block_counts(multisets: np.ndarray, nb: int) -> np.ndarray:
    """How often each of ``nb`` blocks appears in each multiset (rows of block indices)."""
    return (multisets[:, :, None] == np.arange(nb)).sum(axis=1)


def _multiset_medians(blocks: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The median of each multiset of blocks (``counts``: rows of how often each block appears): the
    samples sorted once, each weighted by its block's count; the middle ranks are where the running
    weight reaches them. Equal to ``np.median`` over the concatenated blocks."""
    nb, size = blocks.shape
    flat = blocks.ravel()
    order = np.argsort(flat, kind="stable")
    xs, owner = flat[order], order // size
    n = nb * size
    low_rank, high_rank = (n + 1) // 2, n // 2 + 1  # 1-based ranks of the middle element(s)
    out = np.empty(len(counts))
    step = max(1, _BOOTSTRAP_CHUNK // n)
    for i in range(0, len(counts), step):
        running = np.cumsum(counts[i:i + step][:, owner], axis=1)
        low = xs[(running >= low_rank).argmax(axis=1)]
        high = xs[(running >= high_rank).argmax(axis=1)]
        out[i:i + step] = (low + high) / 2.0
    return out


def _bootstrap_medians(x: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Medians of ``resamples`` seeded resamples. The median of a resample of the sorted samples is
    the sorted sample at the median resampled index, so the work is an integer partition."""
    rng = np.random.default_rng(seed)
    xs = np.sort(x)
    n = xs.size
    k = (n - 1) // 2
    rows = max(1, _BOOTSTRAP_CHUNK // n)
    parts = []
    for start in range(0, resamples, rows):
        count = min(rows, resamples - start)
        idx = rng.integers(0, n, size=(count, n), dtype=np.int64)
        if n % 2:
            parts.append(xs[np.partition(idx, k, axis=1)[:, k]])
        else:
            part = np.partition(idx, [k, k + 1], axis=1)
            parts.append((xs[part[:, k]] + xs[part[:, k + 1]]) / 2.0)
    return np.concatenate(parts)
