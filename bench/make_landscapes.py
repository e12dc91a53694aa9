"""Write the synthetic landscapes under bench/landscapes/ (seeded, so the files are reproducible):

- ``aa-<recorded>.json`` for each recorded ORT landscape: the same knobs and statuses, but every ok
  route's samples drawn from the default route's recording (A/A: no route is truly faster).
- ``launch-bound-gpu.json``: a GPU-like group where routes without CUDA graphs are launch-bound: their
  samples come in sessions whose medians range from 0.88 to 1.96 ms (what a shared H200 showed for a
  transformer's default route), with a heavy tail; CUDA-graph routes stay within 2%.
- ``aa-launch-bound.json``: the same knobs, every route drawn from the launch-bound default's samples.

Run: python bench/make_landscapes.py [--out bench/landscapes]"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trt_routes.backends.landscape import SCHEMA, dump, load, validate  # noqa: E402

SESSIONS, PER_SESSION = 12, 25

GPU_KNOBS: list[dict[str, Any]] = [
    {"option": "-cuda_graphs", "values": ["off", "on"], "default": "off"},
    {"option": "-max_autotune", "values": ["off", "on"], "default": "off"},
    {"option": "-tile", "values": ["64", "128", "256"], "default": "128"},
    {"option": "-epilogue_fusion", "values": ["on", "off"], "default": "on"},
    {"option": "-split_k", "values": ["off", "on"], "default": "off"},
]
#: multiplicative effect of each non-default value on the compute part (ms), and of split_k with tile 64
EFFECT = {("-max_autotune", "on"): 0.93, ("-tile", "64"): 1.05, ("-tile", "256"): 0.97,
          ("-epilogue_fusion", "off"): 1.06, ("-split_k", "on"): 1.01}
COMPUTE_MS, GRAPH_LAUNCH_MS = 0.70, 0.12


def canonical(assign: dict[str, str], knobs: list[dict[str, Any]]) -> str:
    defaults = {k["option"]: k["default"] for k in knobs}
    return " ".join(f"{o}={v}" for o, v in sorted(assign.items()) if v != defaults[o])


def launch_bound_samples(compute: float, graphs: bool, rng: np.random.Generator) -> list[float]:
    """Sessions of samples: with graphs, compute + a small fixed launch cost, 1% jitter; without, each
    session has its own launch overhead (session medians 0.88-1.96 ms for the default's compute) and 4%
    of samples hit a 1.5-3x stall."""
    out: list[float] = []
    for _ in range(SESSIONS):
        if graphs:
            base = compute + GRAPH_LAUNCH_MS
            out += list(base * np.exp(rng.normal(0, 0.006, PER_SESSION)))
        else:
            base = compute + rng.uniform(0.18, 1.26)
            x = base * np.exp(rng.normal(0, 0.03, PER_SESSION))
            stall = rng.random(PER_SESSION) < 0.04
            x[stall] *= rng.uniform(1.5, 3.0, stall.sum())
            out += list(x)
    return [float(f"{v:.5g}") for v in out]


def launch_bound(rng: np.random.Generator) -> dict[str, Any]:
    routes = []
    for values in itertools.product(*(k["values"] for k in GPU_KNOBS)):
        assign = dict(zip((k["option"] for k in GPU_KNOBS), values, strict=True))
        compute = COMPUTE_MS
        for key, factor in EFFECT.items():
            if assign[key[0]] == key[1]:
                compute *= factor
        status = "ok"
        if assign["-split_k"] == "on" and assign["-tile"] == "256":
            status = "build-error"  # an unsupported combination, as real tuners have
        row: dict[str, Any] = {"route": canonical(assign, GPU_KNOBS), "status": status, "build_s": 40.0,
                               "losses": {"cos": 1e-7, "lInf": 2e-4}}
        if status == "ok":
            row["samples_ms"] = launch_bound_samples(compute, assign["-cuda_graphs"] == "on", rng)
        routes.append(row)
    return {"schema": SCHEMA, "backend": "synthetic",
            "knobs": GPU_KNOBS, "routes": routes,
            "meta": {"description": "launch-bound default on a shared GPU: routes without CUDA graphs have "
                                    "session medians from 0.88 to 1.96 ms (default compute) and stalls; CUDA-graph "
                                    "routes stay within 2%. Synthetic (bench/make_landscapes.py).",
                     "expression": " ".join(f"{k['option']}=[{'|'.join(k['values'])}]" for k in GPU_KNOBS)}}


def aa_from(data: dict[str, Any], rng: np.random.Generator, name: str) -> dict[str, Any]:
    """Every ok route's samples are the default route's, rotated by a random offset: the same values (so
    every true median is exactly the default's) in the same sessions, met at different times."""
    default = next(r for r in data["routes"] if r["route"] == "")
    source = np.asarray(default["samples_ms"])
    routes = []
    for r in data["routes"]:
        row = dict(r)
        if row["status"] == "ok":
            row["samples_ms"] = [float(v) for v in np.roll(source, int(rng.integers(0, source.size)))]
            row["losses"] = default.get("losses", {})
        routes.append(row)
    meta = {**data.get("meta", {}), "aligned": False,
            "description": f"A/A from {name}: every ok route drawn from the default route's samples (no route "
                           "is truly faster); rotations do not keep rounds aligned in time"}
    return {**data, "routes": routes, "meta": meta}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "landscapes")
    args = ap.parse_args()
    rng = np.random.default_rng(20261130)
    lb = launch_bound(rng)
    written = {"launch-bound-gpu.json": lb, "aa-launch-bound.json": aa_from(lb, rng, "launch-bound-gpu.json")}
    for path in sorted(args.out.glob("ort-*.json")):
        written[f"aa-{path.name}"] = aa_from(load(path).to_json(), rng, path.name)
    for name, data in written.items():
        validate(data, name)
        (args.out / name).write_text(dump(data), encoding="utf-8")
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
