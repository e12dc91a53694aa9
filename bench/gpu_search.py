"""Group screening on a real GPU compiler (issue 30): ONNX Runtime's CUDA execution provider, every knob of its
catalog in one switch group, on models exported by torchvision and transformers (recipes/onnx-gpu).

Per model, three searches through ``trt-routes apply``, each in a project and cache of its own (nothing shared):
``adaptive`` with ``max_builds`` BUDGET (below twice the one-knob scan, so it screens knobs in groups), trtexec's
``fast`` scan cut at the same BUDGET, and ``adaptive`` without a budget (the scan, combinations and a descent:
the reference). Then the default route and the three winners are built again and timed side by side in one
process (``--rounds`` rounds, the order rotated). Each winner's speedup is the median over rounds of default /
winner; its share is that speedup's log over the reference's.

    python bench/gpu_search.py [--models resnet50,bert-base] [--budget 12] [--rounds 8] [--out results.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "onnx-gpu"
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(RECIPE))

from onnx_gpu import interleaved  # noqa: E402

SEARCHES = ("adaptive, max_builds", "fast, max_builds", "adaptive, no budget")
BACKEND = "onnxruntime-cuda"


def recipe_model(model: str) -> dict[str, Any]:
    """The model's shape profiles and inputs, as the recipe's tuning.yaml gives them."""
    entry = yaml.safe_load((RECIPE / "tuning.yaml").read_text())["models"][model]
    return {key: entry[key] for key in ("shapes", "inputs") if key in entry}


def strategy(name: str, budget: int) -> dict[str, Any]:
    mode = name.split(",")[0]
    return {"mode": mode} if name.endswith("no budget") else {"mode": mode, "max_builds": budget}


def manifest(model: str, path: Path, group: str, search: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "measurement": {"warmup": 10, "iterations": 20, "repeats": 5, "timeout_s": 600},
            "targets": {"gpu": {"kind": "gpu", "name": "*NVIDIA*"}}, "switch_groups": {"all": group},
            "strategies": {"s": search}, "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1.0e-3}]}},
            "defaults": {"backend": BACKEND, "targets": ["gpu"], "switch_group": "all", "strategy": "s",
                         "tolerance": "t"},
            "models": {model: {"path": str(path), **recipe_model(model)}}}


def search_model(model: str, budget: int, rounds: int, iters: int, work: Path) -> dict[str, Any]:
    import make_models  # the recipe's exporter

    from trt_routes.backends.registry import get as backend_named
    from trt_routes.project import open_project
    from trt_routes.tune.apply import apply

    onnx = make_models.HERE / "models" / f"{model}.onnx"
    if not onnx.exists():
        make_models.export(model)
    closed = [k for k in backend_named(BACKEND).catalog().knobs if k.values is not None]
    group = " ".join(k.allowed_text() for k in closed)
    row: dict[str, Any] = {"model": model, "knobs": len(closed), "values": sum(len(k.values or ()) - 1 for k in closed),
                           "searches": {}}
    job = None
    for name in SEARCHES:
        project_dir = work / model / name.replace(", ", "-").replace(" ", "-")
        project_dir.mkdir(parents=True)
        (project_dir / "tuning.yaml").write_text(yaml.safe_dump(manifest(model, onnx, group,
                                                                         strategy(name, budget))))
        result = apply(open_project(project_dir / "tuning.yaml"))
        if len(result.outcomes) != 1:  # blocked (no matching GPU, the provider missing): say why, stop
            raise SystemExit(f"{model} {name}: apply ran no job (exit {result.exit_code}): "
                             f"{[(p.job.name, p.action, p.reasons) for p in result.plan.jobs]}")
        (outcome,) = result.outcomes
        job = outcome.job
        route = outcome.lock_entry.route if outcome.lock_entry is not None else None
        row["searches"][name] = {"builds": outcome.built, "route": route, "error": outcome.error,
                                 "seconds": round(outcome.seconds, 1)}
        print(f"{model} {name}: {outcome.built} builds, {outcome.seconds:.0f} s, route {route!r}"
              f"{'' if outcome.error is None else ', error: ' + outcome.error}", flush=True)
    assert job is not None
    routes = {"default": "", **{n: s["route"] for n, s in row["searches"].items() if s["route"] is not None}}
    times = interleaved(job, routes, rounds, iters)
    row["default_ms"] = statistics.median(times["default"])
    for name, s in row["searches"].items():
        if name in times:
            s["ms"] = statistics.median(times[name])
            s["speedup"] = statistics.median(d / t for d, t in zip(times["default"], times[name], strict=True))
    return row


def shown(search: dict[str, Any]) -> str:
    if search["route"] is None:
        return f"no route: {search['error']}"
    return f"`{search['route']}`" if search["route"] else "the default"


def table(rows: list[dict[str, Any]], budget: int) -> str:
    lines = ["| model | knobs (values) | search | builds | speedup over the default | share of the reference's | "
             "route |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        ref = row["searches"]["adaptive, no budget"].get("speedup")
        for name, s in row["searches"].items():
            up = s.get("speedup")
            share = f"{math.log(up) / math.log(ref):.0%}" if up and ref and ref >= 1.02 else "-"  # else no gain
            search = name.replace("max_builds", f"max_builds {budget}")
            lines.append(f"| {row['model']} | {row['knobs']} ({row['values']}) | {search} | {s['builds']} | "
                         f"{f'{up:.2f}x' if up else '-'} | {share} | {shown(s)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,bert-base")
    parser.add_argument("--budget", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=8,
                        help="a multiple of the routes timed (4) puts each in each place equally often")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for model in args.models.split(","):
            rows.append(search_model(model, args.budget, args.rounds, args.iters, Path(work)))
            if args.out:
                args.out.write_text(json.dumps(rows, indent=2) + "\n")
    from trt_routes.signature import cpu_fields

    print(f"# bench/gpu_search.py --budget {args.budget} ({datetime.date.today().isoformat()}, "
          f"{cpu_fields()['cpu_model']})")
    print(table(rows, args.budget))


if __name__ == "__main__":
    main()
