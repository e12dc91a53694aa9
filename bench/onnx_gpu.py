"""ONNX Runtime's CUDA execution provider (backend onnxruntime-cuda): each locked route of a tuned project
against the EP's defaults, interleaved in one process, with torch.compile's named modes on the same models
for reference (issue 31).

    python bench/onnx_gpu.py --project recipes/onnx-gpu [--rounds 7] [--torch-modes reduce-overhead]
                             [--out results.json]

Reads the project's tuning.lock (run `trt-routes apply` there first). For each job, the backend builds the
default route's and the locked route's engines, loads both, and times them in alternating rounds (a warm-up,
then ``--iters`` runs each, the order flipped every round); a job's speedup is the median over rounds of
default median / locked median. torch.compile runs the model's torch module from the recipe's
make_models.py (same architecture and seed, float32) where ``--torch-modes`` names modes. Geomeans per
switch group are printed against the issue's targets: fp32 >= 1.20x, fp16 >= 1.50x, none below 1.00x."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"fp32": 1.20, "fp16": 1.50}


def _median_ms(runner: Any, feeds: Any, iters: int) -> float:
    return statistics.median(runner.time(feeds, 3, iters, 1))


def interleaved(job: Any, routes: dict[str, str], rounds: int, iters: int) -> dict[str, list[float]]:
    """Each label's median ms per round: every route's engine built and loaded in this process, then timed in
    ``rounds`` rounds of ``iters`` runs, the order rotated every round (two routes: A B, B A, A B ...)."""
    from trt_routes.backends.registry import get as backend_named
    from trt_routes.evidence.inputs import make_inputs
    from trt_routes.routes import route_dict

    backend = backend_named(job.backend)
    feeds = make_inputs(job.inputs, 0)
    labels = list(routes)
    times: dict[str, list[float]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory() as scratch:
        runners = {}
        for i, (label, route) in enumerate(routes.items()):
            spec = job.build_spec(route_dict(route), work_dir=f"{scratch}/{i}")
            engine = Path(scratch) / f"{i}.onnx"
            backend.build(spec, engine)
            runners[label] = backend.load(engine, spec)
            runners[label].run(feeds)
        for r in range(rounds):
            for label in labels[r % len(labels):] + labels[: r % len(labels)]:
                times[label].append(_median_ms(runners[label], feeds, iters))
        del runners
    return times


def job_rows(project_dir: Path, rounds: int, iters: int) -> list[dict[str, Any]]:
    from trt_routes.project import open_project

    project = open_project(project_dir / "tuning.yaml")
    lock = project.read_lock()
    rows = []
    for job in project.jobs:
        entry = lock.jobs.get(job.name)
        if entry is None or entry.route is None or job.backend != "onnxruntime-cuda":
            continue
        times = interleaved(job, {"default": "", "locked": entry.route}, rounds, iters)
        ratios = [d / t for d, t in zip(times["default"], times["locked"], strict=True)]
        rows.append({"job": job.name, "group": job.switch_group, "route": entry.route,
                     "default_ms": statistics.median(times["default"]),
                     "locked_ms": statistics.median(times["locked"]), "speedup": statistics.median(ratios),
                     "spread": [round(min(ratios), 3), round(max(ratios), 3)],
                     "cos_loss": ((entry.losses or {}).get(next(iter(entry.losses or {}), ""), {}) or {}).get("cos")})
    return rows


def torch_modes(project_dir: Path, rows: list[dict[str, Any]], modes: list[str], iters: int) -> None:
    """Median ms of torch.compile(mode) on each model's torch module (float32, CUDA), into ``rows``."""
    if not modes:
        return
    import torch

    sys.path.insert(0, str(project_dir))
    import make_models  # the recipe's exporter: the same modules, seeds and batch sizes

    from trt_routes.evidence.inputs import make_inputs
    from trt_routes.project import open_project

    jobs = {j.name: j for j in open_project(project_dir / "tuning.yaml").jobs}
    done: dict[str, dict[str, float]] = {}  # a model's NAME and NAME-fp32 jobs share one compiled module
    for row in rows:
        job = jobs[row["job"]]
        name = job.model.removesuffix("-fp32")
        if name not in done:
            module = make_models.torch_module(name).cuda().eval()
            feeds = [torch.from_numpy(v).cuda() for _, v in sorted(make_inputs(job.inputs, 0).items())]
            done[name] = {}
            for mode in modes:
                # "MODE+tf32": float32 matmuls on TF32 tensor cores, as the CUDA EP's default (use_tf32=1)
                # does; torch's own default is full float32 matmuls (convolutions use TF32 either way)
                torch.backends.cuda.matmul.allow_tf32 = mode.endswith("+tf32")
                compiled = torch.compile(module, mode=mode.removesuffix("+tf32"))
                with torch.no_grad():
                    for _ in range(5):
                        compiled(*feeds)
                    torch.cuda.synchronize()
                    samples = []
                    for _ in range(iters):
                        t0 = time.perf_counter()
                        compiled(*feeds)
                        torch.cuda.synchronize()
                        samples.append((time.perf_counter() - t0) * 1e3)
                done[name][mode] = statistics.median(samples)
                torch._dynamo.reset()
            print(f"{name}: " + ", ".join(f"torch {m} {ms:.3f} ms" for m, ms in done[name].items()), flush=True)
        row.update({f"torch_{m}_ms": ms for m, ms in done[name].items()})


def table(rows: list[dict[str, Any]], modes: list[str]) -> str:
    head = ["job", "locked route", "default ms", "locked ms", "speedup", "spread", "cos loss",
            *[f"torch {m} ms" for m in modes]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cos = "-" if r["cos_loss"] is None else f"{r['cos_loss']:.1e}"
        cells = [r["job"], f"`{r['route']}`", f"{r['default_ms']:.3f}", f"{r['locked_ms']:.3f}",
                 f"{r['speedup']:.2f}x", f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f}", cos,
                 *[f"{r.get(f'torch_{m}_ms', float('nan')):.3f}" for m in modes]]
        lines.append("| " + " | ".join(cells) + " |")
    for group, target in TARGETS.items():
        ups = [r["speedup"] for r in rows if r["group"] == group]
        if ups:
            geo = math.exp(sum(math.log(u) for u in ups) / len(ups))
            lines.append(f"\n{group}: geomean {geo:.2f}x over {len(ups)} job(s) (target >= {target:.2f}x): "
                         f"{'met' if geo >= target else 'NOT met'}; slowest {min(ups):.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", type=Path, default=REPO / "recipes" / "onnx-gpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--torch-modes", default="", help="comma-separated torch.compile modes, e.g. "
                        "reduce-overhead,max-autotune-no-cudagraphs; MODE+tf32 lets float32 matmuls use TF32")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rows", type=Path, help="the --out of an earlier run: its tuned routes' rows are "
                        "kept (not timed again) and the torch.compile columns added")
    args = parser.parse_args()
    modes = [m for m in args.torch_modes.split(",") if m]
    rows = json.loads(args.rows.read_text()) if args.rows else job_rows(args.project.resolve(), args.rounds,
                                                                         args.iters)
    print(table(rows, []), flush=True)  # the tuned routes first: the reference below takes minutes
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    if not modes:
        return
    try:
        torch_modes(args.project.resolve(), rows, modes, args.iters)
    except Exception as exc:  # the reference column is optional: say why it is missing
        print(f"torch.compile reference stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
    print("\n" + table(rows, modes))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
