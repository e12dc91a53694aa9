"""Benchmark: every search strategy over every landscape file in a folder, many seeds each.

Each seed replays one "world": a trial of route r draws its samples from the landscape (seeded blocks of
recorded samples, as the replay backend does), the same for every strategy (common random numbers).
Strategies run through trt-routes' own code: the strategy objects and their budget (``JobSearch``), the
apply loop's rules (the default route always measured), ``select`` and the side-by-side confirmation
(``confirm.resolve``/``decide`` on re-measurements drawn from the landscape by the worker's own
sequential schedule, ``confirm.run_sequential``: a challenger stops once decided).
The trtexec-like baselines ``fast`` and ``mixed`` pick the lowest mean with a strict ``<`` from one
measurement per route (mixed qualifies phase-2 knobs the same way), no confirmation.

Per strategy and landscape: builds used (new builds, the default included), builds as a share of full's,
regret (true median of the chosen route / true median of the best eligible route; true = median of every
recorded sample), the share of seeds with regret <= 1.03, and the wrong-winner rate (a non-default route
chosen although its true median is not at least 1% below the default's).

Run: python bench/search.py [FOLDER] [--seeds 100] [--strategies adaptive,fast,...]"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trt_routes.backends.landscape import Landscape, load, route_seed  # noqa: E402
from trt_routes.cache import TrialRecord  # noqa: E402
from trt_routes.evidence.measure import timing_stats  # noqa: E402
from trt_routes.manifest import Check, Confirm, Tolerance  # noqa: E402
from trt_routes.plan import outcomes  # noqa: E402
from trt_routes.routes import parse_expression  # noqa: E402
from trt_routes.search import Outcome, Search, make_search  # noqa: E402
from trt_routes.search.job import JobSearch  # noqa: E402
from trt_routes.selection import (  # noqa: E402
    DEFAULT_ROUTE,
    Remeasurement,
    Stopping,
    gate,
    resolve,
    run_sequential,
    select,
    spread_of,
    turn_size,
    turn_target,
)
from trt_routes.signature import cpu_fields  # noqa: E402

#: the quickstart's gate, for landscapes whose meta names no ``tolerance``
TOLERANCE = Tolerance(checks=[Check(metric="cos", threshold=1e-5), Check(metric="lInf", threshold=1e-3)])


def tolerance_of(land: Landscape) -> Tolerance:
    """The landscape's own accuracy gate (``meta.tolerance``, a tuning.yaml tolerance), else the quickstart's."""
    given = land.meta.get("tolerance")
    return Tolerance.model_validate(given) if given else TOLERANCE
ITERATIONS, REPEATS = 20, 5  # the trial protocol replayed (tuning.yaml's measurement)
BUILD_S_UNKNOWN = 1.0


@dataclass(frozen=True)
class Strategy:
    name: str
    mode: str
    confirm: Confirm | None = field(default_factory=Confirm)
    trtexec: bool = False  # lowest mean, strict <, no confirmation
    warm: bool = False  # adaptive warm-started from a related landscape's best route
    max_builds: int | None = None
    max_minutes: float | None = None


STRATEGIES = {
    "adaptive": Strategy("adaptive", "adaptive"),
    "adaptive+warm": Strategy("adaptive+warm", "adaptive", warm=True),
    "fast": Strategy("fast", "fast"),
    "mixed": Strategy("mixed", "mixed"),
    "full": Strategy("full", "full"),
    "fast-trtexec": Strategy("fast-trtexec", "fast", confirm=None, trtexec=True),
    "mixed-trtexec": Strategy("mixed-trtexec", "mixed", confirm=None, trtexec=True),
}


class World:
    """One seed's measurements of one landscape: trial i of route r is the same for every strategy."""

    def __init__(self, land: Landscape, seed: int) -> None:
        self.land = land
        self.tolerance = tolerance_of(land)
        self.seed = seed
        self.count: dict[str, int] = {}
        self.clock = 0.0  # simulated seconds: recorded build times plus measured time
        self.aligned = bool(land.meta.get("aligned"))
        self.remeasure_slots = 0  # side-by-side turns measured (the sequential design stops early)

    def trial(self, route: str) -> TrialRecord:
        k = self.count[route] = self.count.get(route, 0) + 1
        rec = self.land.get(route)
        base: dict[str, Any] = dict(id=route, group_key="g", job="bench", route=route, signature="s", model_digest="m",
                    shape_key="x", settings_key="y", protocol_key="p", reference_key="r", backend="replay")
        if rec is None or rec.status != "ok":
            self.clock += rec.build_s if rec is not None else BUILD_S_UNKNOWN
            status = rec.status if rec is not None else "crashed"
            losses = {"y": {k2: (v if v is not None else math.inf) for k2, v in rec.losses.items()}} if rec else {}
            return TrialRecord(**base, status=status, losses=losses, error="replayed")
        rng = np.random.default_rng(route_seed(self.seed, route, k, "trial"))
        samples = self.land.draw(route, ITERATIONS, REPEATS, rng)
        self.clock += rec.build_s + sum(samples) / 1e3
        st = timing_stats(samples, seed=0, resamples=300, block=ITERATIONS)
        return TrialRecord(**base, status="ok", median_ms=st.median, ci_low=st.ci_low, ci_high=st.ci_high,
                           mean_ms=st.mean, losses={"y": {k2: (v if v is not None else math.inf)
                                                           for k2, v in rec.losses.items()}})

    def remeasure(self, baseline: str, challengers: tuple[str, ...], settings: Confirm) -> Remeasurement:
        k = self.count["@remeasure"] = self.count.get("@remeasure", 0) + 1
        rng = np.random.default_rng(route_seed(self.seed, baseline, *challengers, k, "remeasure"))
        slots = []
        # apply's turn sizing (confirm.turn_size): the spread of the baseline trial's samples (drawn as a trial
        # draws them), then enough runs per turn for it, within slot_ms and max_slot_ms
        trial_samples = self.land.draw(baseline, ITERATIONS, REPEATS, rng)
        iterations = turn_size(trial_samples, settings.iterations, settings.slot_ms, settings.max_slot_ms,
                               turn_target(settings), spread_of(trial_samples, ITERATIONS))
        state = {"round": -1, "in_round": 0, "position": 0.0}

        def measure(route: str, k: int) -> float:
            # recorded landscapes: one moment of the recording per round, so the slots of a round share
            # its contention (see draw_at); synthetic ones: every slot at its own random moment
            if k != state["round"]:
                state["round"], state["in_round"] = k, 0
                state["position"] = float(rng.random())
            elif not self.aligned:
                state["position"] = float(rng.random())
            i = state["in_round"]
            state["in_round"] += 1
            shift = i * iterations / 4 / max(1, len(self.land.get(route).samples_ms))  # type: ignore[union-attr]
            samples = self.land.draw_at(route, state["position"] + shift, iterations)
            self.clock += sum(samples) / 1e3
            self.remeasure_slots += 1
            return float(statistics.median(samples))

        # the worker's sequential schedule: each challenger stops once its verdict is reached
        slots = run_sequential(baseline, challengers, Stopping.of(settings, len(challengers)), measure)
        return Remeasurement(baseline, challengers, tuple(slots))


def trtexec_pick(order: list[str], trials: dict[str, TrialRecord], tolerance: Tolerance) -> str | None:
    """trtexec's rule: in measurement order, keep the lowest mean with a strict <."""
    best: str | None = None
    for route in order:
        t = trials[route]
        if t.status != "ok" or t.mean_ms is None or gate(t, tolerance):
            continue
        if best is None or t.mean_ms < trials[best].mean_ms:  # type: ignore[operator]
            best = route
    return best


def trtexec_outcomes(trials: dict[str, TrialRecord], tolerance: Tolerance) -> dict[str, Outcome]:
    """What trtexec's mixed sees: means, no intervals (so every strict < counts)."""
    return {r: Outcome(t.status == "ok" and t.mean_ms is not None and not gate(t, tolerance), t.mean_ms)
            for r, t in trials.items()}


def run_one(land: Landscape, strategy: Strategy, seed: int, expr_text: str, warm: tuple[str, ...]) -> tuple[
        str | None, int, int, int]:
    """(chosen route, new builds, side-by-side turns measured, turns the fixed-length design would take)
    for one seed."""
    world = World(land, seed)
    expr = parse_expression(expr_text, land.catalog)
    inner: Search = make_search(strategy.mode, expr, land.catalog, warm=warm if strategy.warm else ())
    search = JobSearch(inner, warm, frozenset(), strategy.max_builds, strategy.max_minutes,
                       clock=lambda: world.clock)
    trials: dict[str, TrialRecord] = {}
    order: list[str] = []
    tol = world.tolerance
    view: Callable[[dict[str, TrialRecord]], dict[str, Outcome]] = (
        (lambda t: trtexec_outcomes(t, tol)) if strategy.trtexec else (lambda t: outcomes(t, tol)))
    while True:  # apply's loop, one worker: the default first, then the strategy's batches in order
        batch = search.next_batch(view(trials))
        if DEFAULT_ROUTE not in trials and DEFAULT_ROUTE not in batch:
            batch = [DEFAULT_ROUTE, *batch]
        if not batch:
            break
        for route in batch:
            trials[route] = world.trial(route)
            order.append(route)
    builds = len(order)
    if strategy.trtexec:
        return trtexec_pick(order, trials, tol), builds, 0, 0
    cands = [DEFAULT_ROUTE, *search.candidates(view(trials))]
    sel = select(trials, [r for r in dict.fromkeys(cands) if r in trials], tol)
    stored: dict[tuple[str, tuple[str, ...]], Remeasurement] = {}
    fixed = 0
    for _ in range(3):
        final, requests = resolve(sel, strategy.confirm, None, lambda b, c: stored.get((b, c)))
        if not requests:
            return final.winner, builds, world.remeasure_slots, fixed
        for req in requests:
            assert strategy.confirm is not None
            fixed += 1 + 2 * strategy.confirm.rounds * len(req.challengers)
            stored[(req.baseline, req.challengers)] = world.remeasure(req.baseline, req.challengers, strategy.confirm)
    return final.winner, builds, world.remeasure_slots, fixed


@dataclass
class Truth:
    medians: dict[str, float]
    eligible: set[str]
    best: float
    default: float | None
    full_builds: int


def truth(land: Landscape, expr_text: str) -> Truth:
    expr = parse_expression(expr_text, land.catalog)
    space = set(make_search("full", expr, land.catalog).candidates({})) | {DEFAULT_ROUTE}
    medians, eligible = {}, set()
    for route in space:
        m = land.true_median(route)
        rec = land.get(route)
        if m is None or rec is None:
            continue
        medians[route] = m
        losses = {"y": {k: (v if v is not None else math.inf) for k, v in rec.losses.items()}}
        probe = TrialRecord(id=route, group_key="g", job="j", route=route, signature="s", model_digest="m",
                            shape_key="x", settings_key="y", protocol_key="p", reference_key="r", backend="b",
                            status="ok", median_ms=m, losses=losses)
        if not gate(probe, tolerance_of(land)):
            eligible.add(route)
    best = min(medians[r] for r in eligible)
    return Truth(medians, eligible, best, medians.get(DEFAULT_ROUTE) if DEFAULT_ROUTE in eligible else None,
                 len(space))


def expression_of(land: Landscape) -> str:
    return str(land.meta.get("expression") or land.expression_text())


def related_warm(name: str, lands: dict[str, Landscape]) -> tuple[str, ...]:
    """The true best route of the nearest other landscape with the same knobs (not an A/A one)."""
    me = lands[name]
    options = [k.option for k in me.data.knobs]
    for other, land in sorted(lands.items()):
        if other == name or other.startswith("aa-") or [k.option for k in land.data.knobs] != options:
            continue
        t = truth(land, expression_of(land))
        return (min(t.eligible, key=lambda r: t.medians[r]),)
    return ()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, default=REPO / "bench" / "landscapes")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    args = ap.parse_args()
    files = sorted(args.folder.glob("*.json"))
    if not files:
        raise SystemExit(f"no landscape files (*.json) in {args.folder}")
    lands = {f.stem: load(f) for f in files}
    chosen = [STRATEGIES[s] for s in args.strategies.split(",")]
    started = time.perf_counter()
    print(f"# bench/search.py: {len(files)} landscapes x {len(chosen)} strategies x {args.seeds} seeds "
          f"({datetime.date.today().isoformat()}, {cpu_fields()['cpu_model']}, {platform.python_version()})")
    header = ("| landscape | strategy | builds | of full | regret median | regret p90 | regret <= 1.03 | "
              "wrong winner |")
    print(header + "\n|" + "---|" * 8)
    summary: dict[str, list[tuple[float, float, float]]] = {}
    aa_wrong: dict[str, list[float]] = {}
    turn_rows: list[str] = []  # side-by-side turns the sequential confirmation measured
    for name, land in lands.items():
        expr_text = expression_of(land)
        t = truth(land, expr_text)
        warm = related_warm(name, lands)
        for strategy in chosen:
            if strategy.warm and not warm:
                continue
            regrets, builds, wrong, turns, fixed = [], [], 0, 0, 0
            for seed in range(args.seeds):
                winner, used, seq_turns, fixed_turns = run_one(land, strategy, seed, expr_text, warm)
                builds.append(used)
                turns, fixed = turns + seq_turns, fixed + fixed_turns
                regrets.append(t.medians[winner] / t.best if winner in t.eligible else math.inf)
                if winner not in (None, DEFAULT_ROUTE) and t.default is not None and \
                        not t.medians.get(winner, math.inf) <= 0.99 * t.default:
                    wrong += 1
            share = float(np.mean(builds)) / t.full_builds
            ok = float(np.mean([r <= 1.03 for r in regrets]))
            summary.setdefault(strategy.name, []).append((share, ok, wrong / args.seeds))
            if name.startswith("aa-"):
                aa_wrong.setdefault(strategy.name, []).append(wrong / args.seeds)
            if fixed:
                turn_rows.append(f"{name} {strategy.name}: {turns / args.seeds:.1f} turns per seed, "
                                 f"{turns / fixed:.0%} of the fixed design's")
            print(f"| {name} | {strategy.name} | {np.mean(builds):.1f} | {share:.0%} | "
                  f"{np.median(regrets):.3f} | {np.quantile(regrets, 0.9):.3f} | {ok:.0%} | "
                  f"{wrong / args.seeds:.1%} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s. Targets for adaptive: builds <= 30% of full's, regret <= 1.03 "
          "in >= 90% of seeds, wrong-winner rate <= 2% on A/A landscapes.")
    for name, rows in summary.items():
        print(f"{name}: mean builds share {np.mean([r[0] for r in rows]):.0%}, worst regret<=1.03 share "
              f"{min(r[1] for r in rows):.0%}, worst wrong-winner rate {max(r[2] for r in rows):.1%}")
    if turn_rows:
        print("\nconfirmation (sequential; the fixed design: 1 + 2 x rounds x challengers turns per re-measurement):")
        print("\n".join(f"  {row}" for row in turn_rows))
    worst = max((max(v) for k, v in aa_wrong.items() if not k.endswith("-trtexec")), default=0.0)
    print(f"aa_wrong_winner_max={worst:.4f} (confirmed strategies, A/A landscapes)")


if __name__ == "__main__":
    main()
