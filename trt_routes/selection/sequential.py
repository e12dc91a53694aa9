"""The side-by-side test itself: what one turn measures and how large it is (``turn_size``), the order of
turns (``schedule``), the paired ratios' median and distribution-free interval, and the sequential stopping
rule (``Stopping``, ``run_sequential``; the design is described in ``selection.confirm``). The worker runs it as
it measures; ``selection.confirm.decide`` replays it on the stored slots. No manifest, no pydantic: a worker
imports this module."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: a worker unpickles Stopping and needs no manifest (nor pydantic)
    from trt_routes.manifest.schema import Confirm


#: What one turn of the side-by-side re-measurement reports, per objective rank fact: the median of its runs
#: (latency.p50, and throughput, which is the batch over the median at a fixed batch), or the quantile the
#: objective ranks by. Memory, engine size, build time and energy are not re-measured: the first three are
#: not timing noise, and energy counters (NVML's, RAPL's) tick too coarsely to read one turn.
STATISTICS = {"latency.p50": "p50", "throughput": "p50", "latency.p90": "p90", "latency.p99": "p99"}
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
#: A turn's quantile comes from enough runs that this many of them lie above it (p90: 100 runs, p99: 1000),
#: so one slow run moves it by an order statistic, not from the maximum to the median.
TAIL_RUNS = 10


def statistic_of(rank: str | None) -> str | None:
    """The turn statistic that confirms an objective ranking by ``rank`` (None: no objective, the median);
    None when that fact is not re-measured side by side."""
    return "p50" if rank is None else STATISTICS.get(rank)


def turn_runs(statistic: str, iterations: int) -> int:
    """The fewest runs one turn takes for ``statistic``: ``iterations``, or enough for the quantile."""
    q = QUANTILES[statistic]
    return iterations if q == 0.5 else max(iterations, math.ceil(TAIL_RUNS / (1.0 - q) - 1e-9))


def turn_value(samples: Sequence[float], statistic: str) -> float:
    """One turn's value: the median of its runs, or their quantile (numpy's linear interpolation, as the
    trials' stored facts compute it, ``trt_routes.evidence.facts.latency_facts``)."""
    if statistic == "p50":
        return float(statistics.median(samples))
    import numpy as np

    return float(np.quantile(np.asarray(samples, dtype=np.float64), QUANTILES[statistic]))


#: Runs of the baseline timed (after its warm-up) to see its spread before turns are sized.
PILOT_RUNS = 20


def turn_target(settings: Confirm) -> float:
    """The relative standard error a turn's median is sized for: margin / sqrt 2, so the ratio of two turns has
    a standard error of the margin (a margin under 1% is sized as 1%: a turn cannot grow without end).

    The sign test reads only which side of 1 and of 1 - margin each ratio falls, so turns need not resolve the
    margin one by one: sized for half of it (``SIZING`` "mad-1") they took up to four times the runs (where the
    noise, not ``iterations`` or ``max_slot_ms``, sets their length) for much the same verdicts (bench/RESULTS.md,
    eighth round: bench/search.py over every landscape)."""
    return 0.0 if settings.max_slot_ms <= 0 else max(settings.margin, 0.01) / math.sqrt(2.0)


def spread_of(samples: Sequence[float], block: int = 0) -> float | None:
    """The relative spread of single runs: 1.4826 * MAD / median (a standard deviation where the runs are
    normal, robust to a few slow ones); None for fewer than 5 samples. ``block``: the samples are repeats of
    that many consecutive runs, and each run deviates from its own repeat's median: the run-to-run noise a
    turn's median averages, without the drift between repeats (which pairing the turns cancels)."""
    if len(samples) < 5:
        return None
    median = max(float(statistics.median(samples)), 1e-9)
    if block >= 5 and len(samples) >= 2 * block:
        repeats = [samples[i:i + block] for i in range(0, len(samples) - block + 1, block)]
        deviations = [abs(x - m) for rep in repeats for m in [statistics.median(rep)] for x in rep]
    else:
        deviations = [abs(x - median) for x in samples]
    return 1.4826 * float(statistics.median(deviations)) / median


def turn_size(pilot: Sequence[float], floor_runs: int, slot_ms: float, max_slot_ms: float, target: float,
              spread: float | None = None) -> int:
    """Runs per turn: at least ``floor_runs`` and ``slot_ms`` worth; then as many as the runs' ``spread``
    says a turn's median needs to be within ``target`` (relative standard error 1.2533 * sigma / sqrt(n)),
    at most ``max_slot_ms`` worth. ``pilot``: a few of the baseline's runs (ms), for their time per run,
    and for the spread when none is given (apply gives the baseline trial's: 100 runs after its warm-up,
    where a 20-run pilot just after the engines' switch sometimes read several times the spread). A quiet
    0.04 ms route needs a few dozen runs where a fixed 20 ms turn took 500; a noisy one takes up to the cap."""
    per_run = max(float(statistics.median(pilot)), 1e-6) if pilot else 1.0
    low = max(1, floor_runs, math.ceil(slot_ms / per_run) if slot_ms > 0 else 0)
    if spread is None:
        spread = spread_of(pilot)
    if target <= 0 or spread is None:
        return min(100_000, low)
    need = math.ceil((1.2533 * spread / target) ** 2)
    high = max(low, int(max_slot_ms / per_run))
    return min(100_000, max(low, min(need, high)))


def schedule(baseline: str, challengers: Sequence[str], rounds: int) -> list[str]:
    """The fixed design's order (a re-measurement without ``stopping``; apply's are sequential,
    ``run_sequential``): the baseline before and after every challenger slot, challengers rotated each round
    (A B A C A D A, then A C A D A B A ...), so each challenger is paired with the baseline slots around it.
    One challenger gives A B A B A ..."""
    order = [baseline]
    for k in range(rounds):
        for j in range(len(challengers)):
            order += [challengers[(j + k) % len(challengers)], baseline]
    return order


@dataclass(frozen=True)
class ChallengerResult:
    route: str
    ratio: float | None  # challenger time / baseline time (median of paired ratios)
    ci_low: float | None
    ci_high: float | None
    rounds: int
    passed: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"route": self.route, "ratio": self.ratio, "ci": [self.ci_low, self.ci_high],
                "rounds": self.rounds, "passed": self.passed, "reason": self.reason}


@dataclass(frozen=True)
class Decision:
    baseline: str
    winner: str
    results: tuple[ChallengerResult, ...]
    #: the host's load while the turns ran (``trt_routes.evidence.noise``'s fields of the re-measurement)
    load: dict[str, float] | None = None

    def result(self, route: str) -> ChallengerResult | None:
        return next((r for r in self.results if r.route == route), None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"baseline": self.baseline, "winner": self.winner,
                               "results": [r.to_json() for r in self.results]}
        if self.load:  # kept apart, so decisions recorded before read as before
            out["load"] = dict(self.load)
        return out


def median_interval(values: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """(median, low, high): a distribution-free confidence interval of the median from order statistics
    (the sign-test interval [x_(k), x_(n+1-k)], coverage at least ``confidence``). Too few values for
    that confidence give (median, 0, inf). Unlike a bootstrap it does not under-cover at a dozen
    values, and heavy tails (a launch-bound route's slow sessions) cannot shrink it."""
    x = sorted(values)
    n = len(x)
    median = float(statistics.median(x))
    tail = (1.0 - confidence) / 2.0
    k, cdf = 0, 0.0
    for j in range(n):  # largest k with P(Binomial(n, 1/2) <= k - 1) <= tail
        cdf += math.comb(n, j) / 2.0**n
        if cdf > tail:
            break
        k = j + 1
    if k == 0:
        return median, 0.0, math.inf
    return median, float(x[k - 1]), float(x[n - k])


def _binom_cdf(n: int, j: int) -> float:
    """P(Binomial(n, 1/2) <= j)."""
    return sum(math.comb(n, i) for i in range(j + 1)) / 2.0**n if j >= 0 else 0.0


def _largest_k(n: int, level: float) -> int:
    """The largest k with P(Binomial(n, 1/2) <= k - 1) <= level (0: none)."""
    k = 0
    while k < n and _binom_cdf(n, k) <= level:
        k += 1
    return k


#: All looks together spend at most this share of the fixed design's nominal level per challenger: at
#: 95% confidence, 1.5% of the 2.5% one-sided level (under the 2% wrong-winner target), where the fixed
#: design spent
#: what the sign test's discreteness left (often well under it). The final look keeps its boundary always.
ERROR_CAP = 0.6


@dataclass(frozen=True)
class Stopping:
    """The sequential design of one re-measurement (see the module docstring): up to ``rounds`` ratios per
    challenger, ``challengers`` of them sharing the error (Bonferroni)."""

    margin: float
    confidence: float
    rounds: int
    challengers: int = 1

    @classmethod
    def of(cls, settings: Confirm, challengers: int) -> Stopping:
        return cls(settings.margin, settings.confidence, settings.rounds, max(1, challengers))

    @functools.cached_property
    def boundaries(self) -> dict[int, int]:
        """Look (ratios so far) -> k: that look passes a challenger when at most k - 1 of its ratios are
        >= 1 (the upper end of the order-statistic interval, ``x_(n+1-k)``, is below 1) and its median is
        below 1 - margin. The final look first, with the fixed design's k; interim looks get the rest."""
        tail = (1.0 - self.confidence) / 2.0 / self.challengers
        n_final = self.rounds
        k_final = _largest_k(n_final, tail)
        out = {n_final: k_final} if k_final > 0 else {}
        slack = ERROR_CAP * tail - (_binom_cdf(n_final, k_final - 1) if k_final > 0 else 0.0)
        for n in range(2, n_final):
            k = _largest_k(n, slack)
            if k > 0:
                out[n] = k
                slack -= _binom_cdf(n, k - 1)
        return dict(sorted(out.items()))

    def verdict(self, ratios: Sequence[float]) -> tuple[str | None, int]:
        """Replay the looks over ``ratios`` in order: ("pass" | "fail", ratios used), or (None, all of them)
        while undecided."""
        floor = 1.0 - self.margin
        at_one = below_margin_fail = 0
        looks = self.boundaries
        for n, r in enumerate(ratios, start=1):
            at_one += r >= 1.0
            below_margin_fail += r >= floor
            k = looks.get(n)
            if k is not None and at_one <= k - 1 and statistics.median(ratios[:n]) < floor:
                return "pass", n
            # curtailment: can a later look (or this one, had it passed) still pass it?
            if not any(at_one <= kj - 1 and below_margin_fail <= nj // 2 for nj, kj in looks.items() if nj > n):
                return "fail", n
            if n >= self.rounds:
                return "fail", n
        return None, len(ratios)


def run_sequential(baseline: str, challengers: Sequence[str], stopping: Stopping,
                   measure: Callable[[str, int], float]) -> list[tuple[str, float]]:
    """The side-by-side schedule with sequential stopping, as the worker (and the replayed bench) run it.
    ``measure(route, round)`` times one turn and returns its median; the slots come back in order.

    While two or more challengers are undecided, one baseline turn serves two of them, one just before it
    and one just after: C1 B C2, C3 B C1, C2 B C3, ... (1.5 turns per ratio where B C1 B C2 B took 2). The
    last undecided challenger alternates B C and C B (B C C B B C ...). Each ratio pairs adjacent turns, and
    no baseline turn serves one challenger twice, so each challenger's ratios stay independent. The next
    challengers are the ones with the fewest turns (rotated as ``schedule`` rotates them), and each goes
    before its baseline turn about as often as after it, so a drift tilts half its ratios one way and half
    the other. A challenger leaves the rotation as soon as ``stopping`` decides it."""
    n = len(challengers)
    ratios: dict[str, list[float]] = {c: [] for c in challengers}
    lead = dict.fromkeys(challengers, 0)  # turns before its baseline turn minus turns after it
    turns = dict.fromkeys(challengers, 0)  # bounds the loop even where a turn measures nothing
    open_ = list(challengers)
    slots: list[tuple[str, float]] = []

    def turn(route: str, k: int) -> float:
        t = measure(route, k)
        slots.append((route, t))
        return t

    def record(route: str, t: float, b: float, before: bool) -> None:
        turns[route] += 1
        lead[route] += 1 if before else -1
        if t > 0 and b > 0:
            ratios[route].append(t / b)
        if stopping.verdict(ratios[route])[0] is not None or turns[route] >= stopping.rounds:
            open_.remove(route)

    while open_:
        k = min(turns[c] for c in open_)
        nxt = sorted(open_, key=lambda c: (turns[c], (challengers.index(c) - k) % n))
        if len(nxt) == 1:
            c = nxt[0]
            if lead[c] < 0 and (not slots or slots[-1][0] != baseline):  # C B, never right after a B
                t = turn(c, k)
                record(c, t, turn(baseline, k), True)
            else:
                b = turn(baseline, k)
                record(c, turn(c, k), b, False)
            continue
        x, y = nxt[0], nxt[1]
        if lead[y] < lead[x]:
            x, y = y, x
        tx = turn(x, k)
        b = turn(baseline, k)
        record(x, tx, b, True)
        record(y, turn(y, k), b, False)
    return slots
