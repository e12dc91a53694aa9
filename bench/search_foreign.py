"""Benchmark (issue 30): ``adaptive`` on 200-knob ``landscape@2`` models of other shapes than ``make_trt_landscapes``'.

Group screening was tuned on ``bench/make_trt_landscapes.py``'s models. These are written apart from that
generator, each with one structure it lacks, to see whether the method, not its tuning, holds:

- ``laplace``: every value has an effect (Laplace, scale 0.8%), none is neutral and nothing is clipped, so the
  best route compounds hundreds of effects smaller than the noise; 4% of values crash, 2% fail the gate;
- ``fewbig``: three values 25% faster each; every other value within +-0.3%, clipped (they do not compound);
  8% of values crash, 2% fail the gate;
- ``manysmall``: 40% of knobs have one value 1-3% faster, the rest neutral; 3% crash, 3% fail the gate;
- ``pairfails``: no value fails alone; 60 pairs of values fail the build together; 4% of knobs 5-15% faster,
  10% 1-4% slower;
- ``helpers``: eight values 5-15% faster, each with a partner value worth 8% more only beside it; 3% crash,
  3% fail the gate.

Noise 1.5% per trial, 0.5% per repeat, 1% per run; 2-4 values per knob. Each seed's model is cold (nothing
related known); ``adaptive`` at 60 and 120 builds against trtexec's scan (``fast``) cut at the same budgets,
through the same driver as ``bench/search_scale.py`` (``run``). Regret = the chosen route's true time / the best
of the default and the route a noise-free descent finds (``make_trt_landscapes.best_route``); a failed choice
counts as infinite.

Run: python bench/search_foreign.py [--seeds 30] [--knobs 200] [--kinds laplace,fewbig,...]"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_trt_landscapes import best_route
from search_scale import regret, regret_cells, run

from trt_routes.backends.landscape_model import FORMAT, validate_model
from trt_routes.signature import cpu_fields

KINDS = ("laplace", "fewbig", "manysmall", "pairfails", "helpers")
CASES = (("adaptive@60", "adaptive", 60), ("adaptive@120", "adaptive", 120), ("fast@60 (the scan cut)", "fast", 60),
         ("fast@120 (the scan cut)", "fast", 120))


def _failures(rng: np.random.Generator, knobs: list[dict[str, Any]], crash: float, gate: float,
              pairs: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for knob in knobs:
        for value in knob["values"][1:]:
            u = rng.random()
            if u < crash + gate:
                out.append({"when": {knob["option"]: value}, "status": "crashed" if u < crash else "accuracy-failed"})
    for _ in range(pairs):
        a, b = (knobs[int(i)] for i in rng.choice(len(knobs), 2, replace=False))
        out.append({"when": {a["option"]: a["values"][-1], b["option"]: b["values"][-1]}, "status": "build-error"})
    return out


def model(kind: str, seed: int, n: int = 200) -> dict[str, Any]:
    """One ``landscape@2`` model of ``kind`` (see the module doc), seeded by ``seed``."""
    rng = np.random.default_rng([777, seed, KINDS.index(kind)])
    knobs = [{"option": f"-x{i:03d}", "values": [str(v) for v in range(int(rng.choice([2, 3, 4])))], "default": "0"}
             for i in range(n)]
    effects: dict[str, dict[str, float]] = {}
    interactions: list[dict[str, Any]] = []
    clip: list[dict[str, Any]] = []
    if kind == "laplace":
        effects = {k["option"]: {v: float(rng.laplace(0, 0.008)) for v in k["values"][1:]} for k in knobs}
        failures = _failures(rng, knobs, 0.04, 0.02)
    elif kind == "fewbig":
        effects = {k["option"]: {v: float(rng.normal(0, 0.002)) for v in k["values"][1:]} for k in knobs}
        big = [knobs[int(i)] for i in rng.choice(n, 3, replace=False)]
        for k in big:
            effects[k["option"]][k["values"][-1]] = -0.29
        clip = [{"options": [k["option"] for k in knobs if k not in big], "limit": 0.003}]
        failures = _failures(rng, knobs, 0.08, 0.02)
    elif kind == "manysmall":
        for k in knobs:
            if rng.random() < 0.4:
                value = k["values"][int(rng.integers(1, len(k["values"])))]
                effects[k["option"]] = {value: -float(rng.uniform(0.01, 0.03))}
        failures = _failures(rng, knobs, 0.03, 0.03)
    elif kind == "pairfails":
        for k in knobs:
            u = rng.random()
            if u < 0.14:  # 4% faster, 10% slower
                log = -rng.uniform(0.05, 0.15) if u < 0.04 else rng.uniform(0.01, 0.04)
                effects[k["option"]] = {k["values"][1]: float(log)}
        failures = _failures(rng, knobs, 0.0, 0.0, pairs=60)
    else:  # helpers
        picked = [knobs[int(i)] for i in rng.choice(n, 16, replace=False)]
        for a, b in zip(picked[::2], picked[1::2], strict=True):
            effects[a["option"]] = {a["values"][1]: -float(rng.uniform(0.05, 0.15))}
            interactions.append({"when": {a["option"]: a["values"][1], b["option"]: b["values"][1]}, "log": -0.08})
        failures = _failures(rng, knobs, 0.03, 0.03)
    profile = {"base_ms": 5.0, "effects": effects, "interactions": interactions, "clip": clip,
               "noise": {"trial": 0.015, "repeat": 0.005, "run": 0.01}, "build_s": 120.0}
    return {"format": FORMAT, "knobs": knobs, "failures": failures, "profiles": {"a": profile},
            "header": {"generator": "bench/search_foreign.py", "kind": kind, "seed": seed}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--knobs", type=int, default=200)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, of: " + ", ".join(KINDS))
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    if unknown := sorted(set(kinds) - set(KINDS)):
        ap.error(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    started = time.perf_counter()
    print(f"# bench/search_foreign.py: {args.seeds} seeds of {args.knobs}-knob models of other shapes, cold "
          f"({datetime.date.today().isoformat()}, {cpu_fields()['cpu_model']}, Python {platform.python_version()})")
    print("| kind | case | builds (mean) | regret median | regret p90 | within 3% |\n|---|---|---|---|---|---|")
    for kind in kinds:
        rows: dict[str, list[tuple[float, int]]] = {}
        for seed in range(args.seeds):
            land = validate_model(model(kind, seed, args.knobs))
            best = min(best_route(land, "a", seed=seed)[1], land.true_ms({}, "a"))
            for name, mode, budget in CASES:
                winner, used = run(land, "a", mode, budget, seed)
                rows.setdefault(name, []).append((regret(land, "a", winner, best), used))
        for name, vals in rows.items():
            print(f"| {kind} | {name} | {np.mean([u for _, u in vals]):.1f} | {regret_cells(vals)} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
