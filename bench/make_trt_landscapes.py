"""Write TensorRT-shaped generative landscapes (``trt-routes/landscape@2``) under bench/landscapes/trt/.

Each file models one network on one GPU: ``knobs`` knobs of 2-4 values (default first), ~85% neutral (within
+-0.3%, one clip entry so they do not compound), ~10% small (+-1-5%, mostly slower), ~3% strong gains (5-20%),
~2% strong losses, ten interacting pairs (a knob that helps only with another, one that cancels another's
gain, two that help only together, two that conflict), ~3% of knob values crash the build and ~3% fail the
accuracy gate (``pair_failures``: that share of them only beside another knob's value), 1-3% noise. Two
shape profiles ``a`` and ``b`` share the structure (``b``: strong effects rescaled 0.6-1.4x, small ones
redrawn), as one model at two shapes does. ``--related`` also writes, for each seed, another model on the
same GPU (same knobs and failures, half of its strong gains shared). Every parameter is in the file's
``header``; ``header.pairs`` names the kind of each interaction, in order; ``header.best`` is the best
eligible route found by a noise-free coordinate descent on the model from several starts (a reference for
regret, not a proof).

Run: python bench/make_trt_landscapes.py [--seeds 30] [--knobs 200] [--out bench/landscapes/trt]"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trt_routes.backends.landscape_model import FORMAT, ModelLandscape, validate_model  # noqa: E402

PARAMS: dict[str, Any] = {
    "neutral": 0.85, "small": 0.10, "strong_gain": 0.03, "strong_loss": 0.02, "pairs": 10,
    "crash_values": 0.03, "gate_values": 0.03, "pair_failures": 0.0, "neutral_limit": 0.003,
    "small_range": [0.01, 0.05],
    "small_slower": 0.7, "strong_gain_range": [0.05, 0.20], "strong_loss_range": [0.05, 0.20],
    "noise": {"trial": 0.01, "repeat": 0.005, "run": 0.012}, "base_ms": [0.5, 20.0], "build_s": 180.0,
}


def _structure(rng: np.random.Generator, n: int) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    knobs = []
    for i in range(n):
        count = int(rng.choice([2, 2, 2, 3, 3, 4]))
        knobs.append({"option": f"-k{i:03d}", "values": [str(v) for v in range(count)], "default": "0"})
    kinds = rng.choice(["neutral", "small", "strong_gain", "strong_loss"], size=n,
                       p=[PARAMS["neutral"], PARAMS["small"], PARAMS["strong_gain"], PARAMS["strong_loss"]])
    failures: list[dict[str, Any]] = []
    for k in knobs:
        for v in k["values"][1:]:
            u = rng.random()
            if u < PARAMS["crash_values"]:
                failures.append({"when": {k["option"]: v}, "status": "crashed"})
            elif u < PARAMS["crash_values"] + PARAMS["gate_values"]:
                failures.append({"when": {k["option"]: v}, "status": "accuracy-failed"})
    return knobs, [str(x) for x in kinds], failures


def _effects(rng: np.random.Generator, knobs: list[dict[str, Any]], kinds: list[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    lo, hi = PARAMS["small_range"]
    for k, kind in zip(knobs, kinds, strict=True):
        vals = k["values"][1:]
        if kind == "neutral":
            e = {v: float(rng.uniform(-0.003, 0.003)) for v in vals}
        elif kind == "small":
            sign = 1.0 if rng.random() < PARAMS["small_slower"] else -1.0
            e = {v: float(sign * rng.uniform(lo, hi)) for v in vals}
        elif kind == "strong_gain":
            e = {v: float(rng.uniform(-0.03, 0.03)) for v in vals}
            e[str(rng.choice(vals))] = float(np.log(1 - rng.uniform(*PARAMS["strong_gain_range"])))
        else:
            e = {v: float(np.log(1 + rng.uniform(*PARAMS["strong_loss_range"]))) for v in vals}
        out[k["option"]] = e
    return out


def _pairs(rng: np.random.Generator, knobs: list[dict[str, Any]], kinds: list[str],
           effects: dict[str, dict[str, float]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Ten interacting pairs and the kind of each; effects of the knobs involved are rewritten so each pair
    does what it says."""
    neutral = [i for i, kind in enumerate(kinds) if kind == "neutral"]
    gains = [i for i, kind in enumerate(kinds) if kind == "strong_gain"]
    inter: list[dict[str, Any]] = []
    pair_kinds: list[str] = []
    picks = rng.permutation(neutral)
    p = 0
    for j in range(min(PARAMS["pairs"], len(picks) // 2)):  # a small catalog (--knobs 20) has fewer to pair
        kind = ["helps-with", "cancels", "together", "conflict"][j % 4]
        a = knobs[int(picks[p])]
        b = knobs[int(picks[p + 1])] if kind in ("together", "conflict") or not gains else knobs[int(rng.choice(gains))]
        p += 2
        va, vb = a["values"][1], b["values"][-1] if b["option"] not in effects else min(
            effects[b["option"]], key=lambda v: effects[b["option"]][v])
        g = float(np.log(1 - rng.uniform(0.04, 0.12)))
        if kind == "helps-with":  # a alone neutral; with b's best value, a gains
            effects[a["option"]][va] = 0.0
            inter.append({"when": {a["option"]: va, b["option"]: vb}, "log": g})
        elif kind == "cancels":  # a gains alone; with b's best value it cancels b's gain
            effects[a["option"]][va] = g / 2
            inter.append({"when": {a["option"]: va, b["option"]: vb}, "log": -effects[b["option"]][vb]})
        elif kind == "together":  # neither helps alone; both together gain
            effects[a["option"]][va] = 0.0
            effects[b["option"]][vb] = 0.0
            inter.append({"when": {a["option"]: va, b["option"]: vb}, "log": g})
        else:  # each gains alone; together they are slower than either
            effects[a["option"]][va] = g / 2
            effects[b["option"]][vb] = g / 2
            inter.append({"when": {a["option"]: va, b["option"]: vb}, "log": -1.5 * g})
        kinds[knobs.index(a)] = kinds[knobs.index(b)] = "paired"
        pair_kinds.append(kind)
    return inter, pair_kinds


def best_route(land: ModelLandscape, profile: str, starts: int = 4, seed: int = 0) -> tuple[str, float]:
    """The best eligible route a noise-free coordinate descent finds from the default, from every strong
    single gain at once, and from random starts (greedy: each pass takes every improving single move)."""
    rng = np.random.default_rng(seed)
    knobs = land.data.knobs
    ok_values = {k.option: [v for v in k.values if land.status({k.option: v}) == "ok"] for k in knobs}
    singles = {}
    for k in knobs:
        for v in ok_values[k.option]:
            if v != k.default:
                singles[(k.option, v)] = land.log_factor({k.option: v}, profile)
    starts_list: list[dict[str, str]] = [{}]
    greedy: dict[str, str] = {}
    for (o, v), f in sorted(singles.items(), key=lambda kv: kv[1]):
        if f < -0.004 and o not in greedy:
            greedy[o] = v
    starts_list.append(greedy)
    for _ in range(starts):
        starts_list.append({o: str(rng.choice(vals)) for o, vals in ok_values.items() if rng.random() < 0.05})
    best: tuple[float, dict[str, str]] = (float("inf"), {})
    for start in starts_list:
        cur = dict(start)
        if land.status(cur) != "ok":
            continue
        f = land.log_factor(cur, profile)
        for _ in range(20):
            moved = False
            for k in knobs:
                for v in ok_values[k.option]:
                    trial = {**cur, k.option: v}
                    if trial == cur or land.status(trial) != "ok":
                        continue
                    ft = land.log_factor(trial, profile)
                    if ft < f - 1e-12:
                        cur, f, moved = trial, ft, True
            if not moved:
                break
        if f < best[0]:
            best = (f, cur)
    route = " ".join(f"{o}={v}" for o, v in sorted(best[1].items()) if v != land.defaults[o])
    return route, land.true_ms(route, profile)


def make(seed: int, n: int = 200, related_of: int | None = None) -> dict[str, Any]:
    """One landscape; ``related_of``: another model on the same GPU as the landscape of that seed."""
    rng = np.random.default_rng([20261203, seed])
    base_rng = np.random.default_rng([20261203, related_of if related_of is not None else seed])
    knobs, kinds, failures = _structure(base_rng, n)
    if PARAMS["pair_failures"]:  # that share of failing values fails only beside another knob's last value
        pair_rng = np.random.default_rng([20261203, related_of if related_of is not None else seed, 2])
        for rule in failures:
            other = knobs[int(pair_rng.integers(n))]
            if pair_rng.random() < PARAMS["pair_failures"] and other["option"] not in rule["when"]:
                rule["when"][other["option"]] = other["values"][-1]
    shared = _effects(base_rng, knobs, list(kinds))
    if related_of is None:
        effects = shared
    else:  # same knobs and failures; half of the strong gains kept, the rest redrawn
        own = _effects(rng, knobs, list(kinds))
        effects = {o: (shared[o] if kinds[i] != "strong_gain" or rng.random() < 0.5 else own[o])
                   for i, o in enumerate(k["option"] for k in knobs)}
    inter, pair_kinds = _pairs(rng, knobs, kinds, effects)
    neutral = [k["option"] for k, kind in zip(knobs, kinds, strict=True) if kind == "neutral"]
    base = float(np.exp(rng.uniform(np.log(PARAMS["base_ms"][0]), np.log(PARAMS["base_ms"][1]))))
    profiles: dict[str, Any] = {}
    for name, scale in (("a", 1.0), ("b", None)):
        eff = effects
        if scale is None:  # the same model at another shape
            eff = {}
            for o, values in effects.items():
                kind = kinds[[k["option"] for k in knobs].index(o)]
                if kind == "small":
                    eff[o] = {v: float(np.sign(x) * rng.uniform(*PARAMS["small_range"])) for v, x in values.items()}
                elif kind in ("strong_gain", "strong_loss"):
                    eff[o] = {v: float(x * rng.uniform(0.6, 1.4)) for v, x in values.items()}
                else:
                    eff[o] = dict(values)
        profiles[name] = {"base_ms": base * (1.0 if name == "a" else 2.7),
                          "effects": {o: e for o, e in eff.items() if any(e.values())},
                          "interactions": inter,
                          "clip": [{"options": neutral, "limit": PARAMS["neutral_limit"]}] if neutral else [],
                          "noise": PARAMS["noise"], "build_s": PARAMS["build_s"]}
    data: dict[str, Any] = {"format": FORMAT, "knobs": knobs, "failures": failures, "profiles": profiles,
                            "header": {"generator": "bench/make_trt_landscapes.py", "seed": seed, "knobs": n,
                                       "related_of": related_of, "params": PARAMS,
                                       "kinds": {k: int(kinds.count(k)) for k in sorted(set(kinds))},
                                       "pairs": pair_kinds}}
    land = validate_model(data, f"seed {seed}")
    data["header"]["best"] = {p: dict(zip(("route", "ms"), best_route(land, p, seed=seed), strict=True))
                              for p in profiles}
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--knobs", type=int, default=200)
    ap.add_argument("--related", action="store_true", help="also write another model per seed")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "landscapes" / "trt")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in range(args.seeds):
        files = {f"trt-{args.knobs}-s{seed:02d}.json": make(seed, args.knobs)}
        if args.related:
            files[f"trt-{args.knobs}-s{seed:02d}-other.json"] = make(1000 + seed, args.knobs, related_of=seed)
        for name, data in files.items():
            (args.out / name).write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
            print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
