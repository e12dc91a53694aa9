"""Benchmark (issue 30): ``adaptive`` on TensorRT-shaped 200-knob ``landscape@2`` models under a build budget.

Per seed, ``bench/make_trt_landscapes.make`` gives a model with profiles ``a`` and ``b`` (one network at two
shapes) and another model on the same GPU. Strategies run through trt-routes' own code: the strategy
objects under their budget (``JobSearch``), the apply loop's rule (the default route always measured),
``outcomes`` (the accuracy gate) and ``select`` (no side-by-side confirmation: it adds no build).
Trials are drawn from the model as the replay backend draws them (seeded per seed, route and count).

- cold: profile ``a``, nothing related known, ``max_builds`` 60 and 120, and ``max_minutes`` 180 with the
  model's 3-minute builds (60 builds: the same routes as ``max_builds`` 60);
- warm: profile ``b`` with the route cold@120 chose for profile ``a`` as the warm start (same model, another
  shape), ``max_builds`` 60: with that winner only, and with the values that failed in cold@120's trials
  (``trt_routes.search.priors.failed_values``, what ``plan``/``apply`` read from the cache) screened last;
- other: the other model (profile ``a``) with that same route and those failed values as its priors, 60 builds;
- tuned: the same two cases when profile ``a`` was tuned thoroughly (a fleet's earlier, unbounded tuning): the
  warm start is ``a``'s best route (``header.best``), no failed values known;
- fast@60: trtexec's scan cut at 60 builds (what ``adaptive`` did before group screening).

Regret = the chosen route's true time / the best route the generator's noise-free descent found
(``header.best``; a failed or gate-failing choice counts as infinite). "within 3%": regret <= 1.03.

``--variant`` changes the generator's parameters (the same method on models it was not tuned on): ``noise3``
(three times the noise), ``nofail`` (no failing value), ``fail12`` and ``fail25`` (12% and 25% failing values),
``dense`` (10% strong gains, 5% strong losses, 25% small effects), ``pairfail`` (half the failing values fail
only beside another knob's value).

``--bounds``: how much of the best route's gain lies in interactions. The route a noise-free descent (the one
that finds ``header.best``) chooses on the model with some kinds of interaction hidden, timed on the true model:
what a method that knew every other effect exactly, built nothing and never saw those interactions would reach;
and the best route less its "helps-with" values. A search sees a "helps-with" pair only when it builds both
values together.

``--curve``: cold regret against the budget instead, group screening at 60-400 builds beside the one-knob scan
(then combinations and a descent, what ``adaptive`` does without a budget) at 400, 600 and no budget.

``--cli``: cold@60, cold@120 and warm@60 (winner and failed values) through ``trt-routes apply`` in a subprocess:
real workers, the side-by-side confirmation, and the priors warm@60 reads from the cache that cold@120 left
(shape ``b`` gets another input shape, so it is another job); beside the same cases run in this process.

Run: python bench/search_scale.py [--seeds 30] [--knobs 200] [--variant NAME] [--curve | --bounds | --cli]"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from make_trt_landscapes import PARAMS, best_route, make  # noqa: E402

from trt_routes.backends.landscape import route_seed  # noqa: E402
from trt_routes.backends.landscape_model import ModelLandscape, validate_model  # noqa: E402
from trt_routes.cache import TrialRecord  # noqa: E402
from trt_routes.evidence.measure import timing_stats  # noqa: E402
from trt_routes.manifest import Check, Tolerance  # noqa: E402
from trt_routes.plan import outcomes  # noqa: E402
from trt_routes.routes import parse_expression  # noqa: E402
from trt_routes.search import make_search  # noqa: E402
from trt_routes.search.job import JobSearch  # noqa: E402
from trt_routes.search.priors import failed_values  # noqa: E402
from trt_routes.selection import DEFAULT_ROUTE, select  # noqa: E402
from trt_routes.signature import cpu_fields  # noqa: E402

VARIANTS: dict[str, dict[str, Any]] = {
    "noise3": {"noise": {"trial": 0.03, "repeat": 0.015, "run": 0.036}},
    "nofail": {"crash_values": 0.0, "gate_values": 0.0},
    "fail12": {"crash_values": 0.06, "gate_values": 0.06},
    "fail25": {"crash_values": 0.125, "gate_values": 0.125},
    "dense": {"neutral": 0.6, "small": 0.25, "strong_gain": 0.1, "strong_loss": 0.05},
    "pairfail": {"pair_failures": 0.5},
}
TOL = Tolerance(checks=[Check(metric="cos", threshold=1e-4)])
ITERATIONS, REPEATS = 20, 5


def trial(land: ModelLandscape, profile: str, route: str, seed: int, k: int) -> TrialRecord:
    base: dict[str, Any] = dict(id=route, group_key="g", job="bench", route=route, signature="s", model_digest="m",
                                shape_key="x", settings_key="y", protocol_key="p", reference_key="r",
                                backend="replay", build_s=land.data.profiles[profile].build_s)
    status = land.status(route)
    if status not in ("ok", "accuracy-failed"):
        return TrialRecord(**base, status=status, error="replayed")
    rng = np.random.default_rng(route_seed(seed, route, profile, ITERATIONS, REPEATS, k))
    samples = land.samples(route, profile, ITERATIONS, REPEATS, rng)
    st = timing_stats(samples, seed=0, resamples=200, block=ITERATIONS)
    # an accuracy-failed route is timed too, as the worker does (its outputs are NaN: infinite losses)
    return TrialRecord(**base, status=status, median_ms=st.median, ci_low=st.ci_low, ci_high=st.ci_high,
                       mean_ms=st.mean, losses={"y": {"cos": 0.0 if status == "ok" else math.inf}})


def run(land: ModelLandscape, profile: str, mode: str, budget: int | None, seed: int, warm: tuple[str, ...] = (),
        avoid: tuple[str, ...] = (), seen: dict[str, TrialRecord] | None = None,
        scan: bool = False, minutes: float | None = None) -> tuple[str | None, int]:
    """(chosen route, builds) of one search, apply's loop with one worker. ``avoid``: values that failed for a
    related job (``trt_routes.search.priors``); ``seen`` receives the trials; ``scan``: ``adaptive`` as it
    searches without a budget (the one-knob scan, then combinations), cut at ``budget``; ``minutes``: a
    ``max_minutes`` budget (the model's ``build_s`` per build; no clock runs, so the search decides alone)."""
    expr = parse_expression(land.expression_text(), land.catalog)
    inner = make_search(mode, expr, land.catalog, warm=warm,
                        budget=budget if mode == "adaptive" and not scan else None, avoid=avoid, minutes=minutes)
    search = JobSearch(inner, warm, frozenset(), budget, minutes)
    trials: dict[str, TrialRecord] = {}
    while True:
        batch = search.next_batch(outcomes(trials, TOL))
        if DEFAULT_ROUTE not in trials and DEFAULT_ROUTE not in batch:
            batch = [DEFAULT_ROUTE, *batch]
        if not batch:
            break
        for route in batch:
            trials[route] = trial(land, profile, route, seed, 1)
    cands = [DEFAULT_ROUTE, *search.candidates(outcomes(trials, TOL))]
    sel = select(trials, [r for r in dict.fromkeys(cands) if r in trials], TOL)
    if seen is not None:
        seen.update(trials)
    return sel.winner, len(trials)


def regret(land: ModelLandscape, profile: str, route: str | Mapping[str, str] | None, best_ms: float) -> float:
    if route is None or land.status(route) != "ok":
        return math.inf
    return land.true_ms(route, profile) / best_ms


def regret_cells(vals: list[tuple[float, int]]) -> str:
    """A table's regret median, p90 and share within 3% of the best, from (regret, builds) per seed."""
    reg = np.array([r for r, _ in vals])
    return f"{np.median(reg):.3f} | {np.quantile(reg, 0.9):.3f} | {np.mean(reg <= 1.03):.0%}"


CURVE: tuple[tuple[str, int | None, bool], ...] = (
    *(("adaptive, max_builds", b, False) for b in (60, 120, 240, 400, 600, 800)),
    *(("adaptive without a budget, cut at", b, True) for b in (400, 600, None)))


def title(mode: str, seeds: int, knobs: int, variant: str | None, what: str = "") -> str:
    """The table's first line: what ran, where and when."""
    return (f"# bench/search_scale.py{mode}: {seeds} seeds of {knobs}-knob TensorRT-shaped models"
            f"{f', variant {variant}' if variant else ''}{what} ({datetime.date.today().isoformat()}, "
            f"{cpu_fields()['cpu_model']}, Python {platform.python_version()})")


def curve(seeds: int, knobs: int, variant: str | None) -> None:
    """Cold ``adaptive`` at growing budgets: with ``max_builds`` (group screening below 5/4 of the scan's routes),
    and without one (the one-knob scan, combinations, a descent) cut at a number of builds."""
    started = time.perf_counter()
    rows: dict[tuple[str, int | None, bool], list[tuple[float, int]]] = {}
    for seed in range(seeds):
        data = make(seed, knobs)
        land, best = validate_model(data), float(data["header"]["best"]["a"]["ms"])
        for case in CURVE:
            winner, used = run(land, "a", "adaptive", case[1], seed, scan=case[2])
            rows.setdefault(case, []).append((regret(land, "a", winner, best), used))
        print(f"seed {seed} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    print(title(" --curve", seeds, knobs, variant, ", cold"))
    print("| search | max_builds | builds (mean) | regret median | regret p90 | within 3% |\n|---|---|---|---|---|---|")
    for (name, budget, _), vals in rows.items():
        print(f"| {name} | {budget or 'none'} | {np.mean([u for _, u in vals]):.0f} | {regret_cells(vals)} |")
    print(f"\n{time.perf_counter() - started:.0f} s")


HIDDEN: tuple[tuple[str, frozenset[str]], ...] = (
    ("every knob value's own effect, no interaction", frozenset({"helps-with", "cancels", "together", "conflict"})),
    ("everything but the \"helps-with\" pairs", frozenset({"helps-with"})),
    ("everything but the \"together\" pairs", frozenset({"together"})),
    ("everything but \"helps-with\" and \"together\"", frozenset({"helps-with", "together"})))


def bounds(seeds: int, knobs: int, variant: str | None) -> None:
    """The regret of a method that knows the model exactly but for the interactions of some kinds (see the doc)."""
    started = time.perf_counter()
    rows: dict[str, list[tuple[float, int]]] = {}
    for seed in range(seeds):
        data = make(seed, knobs)
        land, best = validate_model(data), float(data["header"]["best"]["a"]["ms"])
        for name, hidden in HIDDEN:
            known = copy.deepcopy(data)
            for profile in known["profiles"].values():
                profile["interactions"] = [x for x, kind in zip(profile["interactions"], data["header"]["pairs"],
                                                                strict=True) if kind not in hidden]
            route, _ = best_route(validate_model(known), "a", seed=seed)
            rows.setdefault(name, []).append((regret(land, "a", route, best), 0))
        # the same question without a descent: the best route less the values whose gain is a "helps-with" pair's
        assign = land.assignment(str(data["header"]["best"]["a"]["route"]))
        helpers = {next(iter(x["when"])) for x, kind in zip(data["profiles"]["a"]["interactions"],
                                                           data["header"]["pairs"], strict=True)
                   if kind == "helps-with" and all(assign.get(o) == v for o, v in x["when"].items())}
        rows.setdefault('(the best route less its "helps-with" values)', []).append(
            (regret(land, "a", {o: v for o, v in assign.items() if o not in helpers}, best), 0))
        for budget in (60, 120):  # this search, for comparison
            winner, used = run(land, "a", "adaptive", budget, seed)
            rows.setdefault(f"(adaptive, cold, {budget} builds, knowing nothing)", []).append(
                (regret(land, "a", winner, best), used))
        print(f"seed {seed} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    print(title(" --bounds", seeds, knobs, variant, ", profile a"))
    print("| the method knows exactly (no noise, no budget) | regret median | regret p90 | within 3% |")
    print("|---|---|---|---|")
    for name, vals in rows.items():
        print(f"| {name} | {regret_cells(vals)} |")
    print(f"\n{time.perf_counter() - started:.0f} s")


MANIFEST = """schema_version: 1
paths: {{cache: {cache}}}
measurement: {{warmup: 0, iterations: {iterations}, repeats: {repeats}, settle: false}}
switch_groups: {{g: "{group}"}}
strategies: {{s: {{mode: adaptive, max_builds: {budget}}}}}
tolerances: {{t: {{checks: [{{metric: cos, threshold: 1.0e-4}}]}}}}
defaults: {{backend: replay, switch_group: g, strategy: s, tolerance: t}}
models: {{m: {{path: {model}, shapes: {{{shape}: {{x: [{size}]}}}}}}}}
"""


def apply_cli(root: Path, land: ModelLandscape, name: str, shape: str, budget: int, cache: str) -> str | None:
    """The route ``trt-routes apply`` locks for profile ``shape`` of ``root/m.json`` (a subprocess in a folder of
    its own, trials in ``cache``); shape ``b`` gets another input shape, so it is another job, not ``a``'s."""
    import subprocess

    from trt_routes.project import open_project

    folder = root / name
    folder.mkdir()
    (folder / "tuning.yaml").write_text(MANIFEST.format(
        cache=cache, iterations=ITERATIONS, repeats=REPEATS, group=land.expression_text(), budget=budget,
        model=root / "m.json", shape=shape, size=" ab".index(shape)))
    done = subprocess.run([sys.executable, "-c", "from trt_routes.cli.app import main; main()", "apply"],
                          cwd=folder, env={**os.environ, "TRT_ROUTES_LANDSCAPE": str(root / "m.json")},
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{root} {name}: apply exited {done.returncode}: {done.stderr[-2000:]}")
    return open_project(folder / "tuning.yaml").read_lock().jobs[f"m/{shape}/cpu"].route


def cli(seeds: int, knobs: int, variant: str | None) -> None:
    """The cold and warm cases through ``trt-routes apply`` (``apply_cli``: real workers, the side-by-side
    confirmation, priors read from the cache), beside the same cases run in this process."""
    import tempfile

    started = time.perf_counter()
    rows: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            data = make(seed, knobs)
            land, root = validate_model(data), Path(tmp) / str(seed)
            root.mkdir()
            (root / "m.json").write_text(json.dumps(data))
            best = {p: float(data["header"]["best"][p]["ms"]) for p in ("a", "b")}
            shared = str(root / "shared.sqlite")  # cold@120 on shape a, then warm@60 on shape b read it
            related: dict[str, TrialRecord] = {}
            prior: tuple[str, ...] = ()
            for name, shape, budget, cache in (("cold@60", "a", 60, str(root / "cold60.sqlite")),
                                               ("cold@120", "a", 120, shared),
                                               ("warm@60, winner and failed values", "b", 60, shared)):
                chosen = apply_cli(root, land, name.split(",")[0].replace("@", "-"), shape, budget, cache)
                warm = shape == "b"
                mine, _ = run(land, shape, "adaptive", budget, seed, prior if warm else (),
                              failed_values(related.values()) if warm else (),
                              seen=related if cache == shared else None)
                if name == "cold@120":
                    prior = (mine,) if mine else ()
                rows.setdefault(name, []).append((regret(land, shape, chosen, best[shape]),
                                                  regret(land, shape, mine, best[shape])))
            print(f"seed {seed} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    print(title(" --cli", seeds, knobs, variant))
    print("| case | `trt-routes apply`: regret median | within 3% | in this process: regret median | within 3% |\n"
          "|---|---|---|---|---|")
    for name, vals in rows.items():
        cells = [f"{np.median(x):.3f} | {np.mean(x <= 1.03):.0%}" for x in np.array(vals).T]
        print(f"| {name} | {' | '.join(cells)} |")
    print(f"\n{time.perf_counter() - started:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--knobs", type=int, default=200)
    ap.add_argument("--variant", choices=sorted(VARIANTS), help="other generator parameters (see the doc)")
    ap.add_argument("--curve", action="store_true",
                    help="regret against the build budget instead: group screening and the one-knob scan, cold")
    ap.add_argument("--bounds", action="store_true",
                    help="what a method that knows the model but for some kinds of interaction reaches")
    ap.add_argument("--cli", action="store_true", help="the cold and warm cases through `trt-routes apply` too")
    args = ap.parse_args()
    PARAMS.update(VARIANTS.get(args.variant or "", {}))
    if args.cli:
        cli(args.seeds, args.knobs, args.variant)
        return
    if args.curve or args.bounds:
        (curve if args.curve else bounds)(args.seeds, args.knobs, args.variant)
        return
    started = time.perf_counter()
    rows: dict[str, list[tuple[float, int]]] = {}
    for seed in range(args.seeds):
        data, other_data = make(seed, args.knobs), make(1000 + seed, args.knobs, related_of=seed)
        land, other = validate_model(data), validate_model(other_data)
        best = {p: float(data["header"]["best"][p]["ms"]) for p in ("a", "b")}
        other_best = float(other_data["header"]["best"]["a"]["ms"])
        cold: dict[int, str | None] = {}
        related: dict[str, TrialRecord] = {}  # what the cache holds after cold@120: its trials
        for budget in (60, 120):
            cold[budget], used = run(land, "a", "adaptive", budget, seed, seen=related if budget == 120 else None)
            rows.setdefault(f"cold@{budget}", []).append((regret(land, "a", cold[budget], best["a"]), used))
        winner, used = run(land, "a", "adaptive", None, seed, minutes=180.0)
        rows.setdefault("cold, max_minutes 180 (3-minute builds)", []).append(
            (regret(land, "a", winner, best["a"]), used))
        winner, used = run(land, "a", "fast", 60, seed)
        rows.setdefault("fast@60 (before)", []).append((regret(land, "a", winner, best["a"]), used))
        prior = (cold[120],) if cold[120] else ()
        avoid = failed_values(related.values())
        winner, used = run(land, "b", "adaptive", 60, seed, prior)
        rows.setdefault("warm@60, winner only", []).append((regret(land, "b", winner, best["b"]), used))
        winner, used = run(land, "b", "adaptive", 60, seed, prior, avoid)
        rows.setdefault("warm@60, winner and failed values", []).append((regret(land, "b", winner, best["b"]), used))
        winner, used = run(land, "b", "adaptive", 60, seed)
        rows.setdefault("cold@60 on the warm rows' profile", []).append((regret(land, "b", winner, best["b"]), used))
        winner, used = run(other, "a", "adaptive", 60, seed, prior, avoid)
        rows.setdefault("other model@60 (its winner and failed values)", []).append(
            (regret(other, "a", winner, other_best), used))
        winner, used = run(other, "a", "adaptive", 60, seed)
        rows.setdefault("other model cold@60", []).append((regret(other, "a", winner, other_best), used))
        tuned = (str(data["header"]["best"]["a"]["route"]),)
        rows.setdefault("the tuned route of shape a, as is on shape b (no build)", []).append(
            (regret(land, "b", tuned[0], best["b"]), 0))
        winner, used = run(land, "b", "adaptive", 60, seed, tuned)
        rows.setdefault("warm@60 from shape a tuned thoroughly", []).append(
            (regret(land, "b", winner, best["b"]), used))
        winner, used = run(other, "a", "adaptive", 60, seed, tuned)
        rows.setdefault("other model@60 from that tuned route", []).append(
            (regret(other, "a", winner, other_best), used))
        print(f"seed {seed} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    print(title("", args.seeds, args.knobs, args.variant))
    print("| case | builds (mean) | regret median | regret p90 | within 3% |\n|---|---|---|---|---|")
    for name, vals in rows.items():
        print(f"| {name} | {np.mean([u for _, u in vals]):.1f} | {regret_cells(vals)} |")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
