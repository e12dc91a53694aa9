"""Benchmark: trial throughput with 1 and 2 workers (issue 8). Target: >= 1.8x with two GPUs.

Each run tunes a fresh copy of one project (empty cache, fresh Inductor cache dir) with ``apply --workers N``
and reports trials per second over the whole apply (references, worker start-up and selection included).
Runs go from the most workers to the fewest, so warm OS file caches favour the baseline (1 worker).

* ``--backend onnxruntime`` (default; CPU targets): the quickstart CNN and transformer block, ``full`` over
  12 routes each. Two CPU workers split the cores between them, which is a different measurement (the
  signature says so: ``cpu_workers``), so this shows dispatch scaling, not the same trials faster.
* ``--backend torch-inductor`` (GPU targets, needs torch and >= 2 GPUs): a small MLP in float16, ``full``
  over 8 jit routes; one worker per GPU, pinned with CUDA_VISIBLE_DEVICES. Same trials, same keys.

Run: python bench/scale.py [--backend onnxruntime|torch-inductor] [--workers 2,1] [--group EXPR] [--json FILE]"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trt_routes.project import open_project  # noqa: E402
from trt_routes.signature import detect  # noqa: E402
from trt_routes.tune.apply import ApplyOptions, apply  # noqa: E402

TARGET_RATIO = 1.8
ORT_GROUP = ("-graph_optimization_level=[disabled|basic|extended] -disable:ConvBNFusion=[off|on] "
             "-enable_mem_pattern=[0|1]")
TORCH_GROUP = "-freezing=[0|1] -aggressive_fusion=[0|1] -triton.cudagraphs=[0|1]"  # cheap builds: not autotuning
TORCH_CPU_GROUP = "-freezing=[0|1] -cpp.threads=[1|2]"  # --device cpu: a local smoke run of the same path
MLP = '''"""A small MLP for the scaling benchmark."""
import torch
from torch import nn


def mlp(shapes):
    width = 1024
    return nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.LayerNorm(width),
                         nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
'''


def ort_project(root: Path, group: str | None = None) -> Path:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_models", REPO / "recipes" / "quickstart" / "make_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    models = module.write_models(root / "models")
    data: dict[str, Any] = {
        "schema_version": 1,
        "measurement": {"warmup": 5, "iterations": 20, "repeats": 5, "timeout_s": 300},
        "switch_groups": {"g": group or ORT_GROUP}, "strategies": {"full": {"mode": "full"}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}]}},
        "defaults": {"switch_group": "g", "strategy": "full", "tolerance": "t"},
        "models": {"cnn": {"path": str(Path(models["resnet_like"]).relative_to(root)),
                           "shapes": {"bs8": {"input": [8, 3, 32, 32]}}},
                   "tb": {"path": str(Path(models["transformer_block"]).relative_to(root)),
                          "shapes": {"s64": {"x": [4, 64, 64]}}}},
    }
    (root / "tuning.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root / "tuning.yaml"


#: --models: real-sized models of recipes/torch-gpu (builds of 5-20 s on an H200), by name -> shapes
RECIPE_MODELS = {"resnet50": {"bs16": {"image": [16, 3, 224, 224]}},
                 "mobilenet_v3": {"bs32": {"image": [32, 3, 224, 224]}},
                 "vit_b16": {"bs8": {"image": [8, 3, 224, 224]}}}


def torch_project(root: Path, device: str = "gpu", group: str | None = None, recipe: list[str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "bench_models.py").write_text(MLP)
    if recipe:
        shutil.copy(REPO / "recipes" / "torch-gpu" / "models.py", root / "models.py")
    data: dict[str, Any] = {
        "schema_version": 1,
        "measurement": {"warmup": 10, "iterations": 50, "repeats": 5, "timeout_s": 600},
        "targets": {"gpu": {"kind": "gpu", "name": "*"}} if device == "gpu" else {"cpu": {"kind": "cpu"}},
        "switch_groups": {"g": group or (TORCH_GROUP if device == "gpu" else TORCH_CPU_GROUP)},
        # throughput of trials: the side-by-side confirmation after the search runs in one worker, so it is off
        "strategies": {"full": {"mode": "full", "confirm": False}},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 5e-3}]}},
        "defaults": {"backend": "torch-inductor", "targets": [device], "switch_group": "g", "strategy": "full",
                     "tolerance": "t", "settings": {"dtype": "float16" if device == "gpu" else "float32"}},
        "models": {"mlp": {"entry": "bench_models:mlp", "shapes": {"bs64": {"input": [64, 1024]}}}},
    }
    if recipe:
        data["models"] = {name.replace("_", "-"): {"entry": f"models:{name}", "shapes": RECIPE_MODELS[name]}
                          for name in recipe}
    (root / "tuning.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root / "tuning.yaml"


class Timeline:
    """A reporter that keeps when each trial ran on which worker (its end as the coordinator saw it, less
    the task's wall time inside the worker), to show where the time outside any trial goes."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.trials: list[tuple[str, str, float, float]] = []  # (worker, job, start s, end s)
        self.jobs: dict[str, list[float]] = {}  # job -> [started, done]

    def plan(self, plan: Any) -> None:
        self.planned_s = time.perf_counter() - self.t0  # project loaded, environment detected, plan made

    def message(self, text: str) -> None: ...
    def phase(self, job: object, text: str) -> None: ...
    def rebuild(self, job: object, route: str) -> None: ...

    def job_start(self, job: Any, builds: int) -> None:
        self.jobs[job.name] = [time.perf_counter() - self.t0]

    def job_done(self, outcome: Any) -> None:
        self.jobs.setdefault(outcome.job.name, [0.0]).append(time.perf_counter() - self.t0)

    def trial_done(self, job: Any, trial: Any) -> None:
        end = time.perf_counter() - self.t0
        took = float(trial.meta.worker_s or (trial.build_s or 0) + (trial.measure_s or 0))
        self.trials.append((trial.meta.worker or "worker", job.name, end - took, end))

    def summary(self, wall: float) -> dict[str, Any]:
        """Per worker: time before its first trial, idle between trials, after its last; and each job's span."""
        out: dict[str, Any] = {}
        for worker in sorted({w for w, *_ in self.trials}):
            mine = sorted((a, b) for w, _, a, b in self.trials if w == worker)
            gaps = sum(max(0.0, a - prev_end) for (_, prev_end), (a, _) in pairwise(mine))
            out[worker] = {"before_first_s": round(mine[0][0], 1), "between_s": round(gaps, 1),
                           "after_last_s": round(wall - mine[-1][1], 1), "trials": len(mine)}
        out["planned_s"] = round(getattr(self, "planned_s", 0.0), 2)
        out["jobs"] = {name: [round(t, 1) for t in span] for name, span in self.jobs.items()}
        out["timeline"] = [(w, j, round(a, 1), round(b, 1)) for w, j, a, b in sorted(self.trials, key=lambda t: t[2])]
        return out


def run(template: Path, workers: int, scratch: Path, pin: bool = True, own_caches: bool = False) -> dict[str, Any]:
    """One apply with ``workers`` workers; ``pin=False``: GPU workers not bound to their cores (only their
    compile pools bounded), as before GPU workers were pinned, for comparison in the same invocation."""
    dest = scratch / f"w{workers}{'' if pin else 'u'}{'c' if own_caches else ''}"
    import trt_routes.execute.pool as pool

    pin_gpu_slots = pool.pin_gpu_slots
    if not pin:
        pool.pin_gpu_slots = lambda slots: [pool.Slot(s.name, s.device, s.env) for s in pin_gpu_slots(slots)]
    if own_caches:  # each worker its own Inductor and Triton cache folders
        pool.pin_gpu_slots = lambda slots: [
            pool.Slot(s.name, s.device, {**s.env, "TORCHINDUCTOR_CACHE_DIR": str(dest / f"inductor-{s.name}"),
                                         "TRITON_CACHE_DIR": str(dest / f"triton-{s.name}")}, s.cpus)
            for s in pin_gpu_slots(slots)]
    shutil.copytree(template.parent, dest)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(dest / "inductor-cache")  # cold compile caches
    os.environ["TRITON_CACHE_DIR"] = str(dest / "triton-cache")
    project = open_project(dest / "tuning.yaml")
    t0 = time.perf_counter()
    timeline = Timeline()
    timeline.t0 = t0
    try:
        result = apply(project, ApplyOptions(workers=workers), reporter=timeline)  # type: ignore[arg-type]
    finally:
        pool.pin_gpu_slots = pin_gpu_slots
    wall = time.perf_counter() - t0
    with project.open_cache() as cache:
        rows = cache.all_trials()
    busy = sum((t.build_s or 0) + (t.measure_s or 0) for t in rows)
    by_worker: dict[str, int] = {}
    firsts: dict[str, float] = {}  # each worker's first trial also pays what the warm-up did not cover
    for t in sorted(rows, key=lambda t: t.created_at):
        name = t.meta.worker or "worker"
        by_worker[name] = by_worker.get(name, 0) + 1
        firsts.setdefault(name, (t.build_s or 0) + (t.measure_s or 0))
    return {"workers": workers, "pinned": pin, "exit_code": result.exit_code, "trials": len(rows), "wall_s": wall,
            "trials_per_s": len(rows) / wall, "busy_s": busy, "by_worker": by_worker,
            "busy_after_first_s": busy - sum(firsts.values()), "first_trial_s": firsts,
            "trials_detail": [(t.route, t.meta.worker, t.build_s, t.measure_s, t.log[:600], t.job, t.median_ms)
                              for t in rows],
            "statuses": sorted({str(t.status) for t in rows}), "outside_trials": timeline.summary(wall),
            "routes": {o.job.name: (o.entry or {}).get("route") for o in result.outcomes}}


def prime(template: Path, scratch: Path) -> None:
    """Plan a throwaway copy once, untimed: the coordinator's one-time imports (the backend, the models'
    modules) would otherwise all land in whichever run goes first."""
    from trt_routes.tune.apply import compute_plan

    shutil.copytree(template.parent, scratch / "prime")
    project = open_project(scratch / "prime" / "tuning.yaml")
    with project.open_cache() as cache:
        compute_plan(project, cache, project.read_lock())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="onnxruntime", choices=["onnxruntime", "torch-inductor"])
    ap.add_argument("--workers", default="2,1",
                    help="worker counts, in the order to run them; '2u': two GPU workers not bound to cores, "
                         "'2c': two with their own compile caches")
    ap.add_argument("--device", default="gpu", choices=["gpu", "cpu"], help="torch-inductor's target kind")
    ap.add_argument("--group", default=None,
                    help="switch group (default: onnxruntime's three knobs, 12 routes; torch-inductor's three jit "
                         "knobs, 8 routes)")
    ap.add_argument("--models", default=None,
                    help=f"torch-inductor: recipes/torch-gpu models instead of the MLP ({', '.join(RECIPE_MODELS)})")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    counts = [(int(x.rstrip("uc")), not x.endswith("u"), x.endswith("c")) for x in args.workers.split(",")]
    env = detect()
    if args.backend == "torch-inductor":
        import torch  # noqa: F401  (warms the OS file cache, so the first run does not pay a cold import alone)
    scratch = Path(tempfile.mkdtemp(prefix="trt-routes-scale-"))
    try:
        if args.backend == "onnxruntime":
            template = ort_project(scratch / "template", args.group)
        else:
            template = torch_project(scratch / "template", args.device, args.group,
                                     args.models.split(",") if args.models else None)
        prime(template, scratch)
        rows = []
        for n, pin, own in counts:  # each run reported as it ends (a time-limited run keeps what finished)
            rows.append(run(template, n, scratch, pin, own))
            rows[-1]["own_caches"] = own
            r = rows[-1]
            print(f"workers={n}{'' if pin else ' (not pinned)'}: {r['trials']} trials in {r['wall_s']:.1f} s, "
                  f"exit {r['exit_code']}, busy {r['busy_s']:.1f} s ({r['busy_after_first_s']:.1f} s after each "
                  f"worker's first trial; first trials {r['first_trial_s']})", flush=True)
            idle = {w: v for w, v in r["outside_trials"].items() if w not in ("jobs", "timeline")}
            print(f"  outside trials, per worker: {idle}; plan made at {r['outside_trials']['planned_s']} s; "
                  f"jobs (start, done): {r['outside_trials']['jobs']}",
                  flush=True)
            if args.json:
                args.json.write_text(json.dumps({"backend": args.backend, "rows": rows}, indent=2, default=str))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    base = next((r for r in rows if r["workers"] == 1), rows[-1])
    if not base["trials"]:
        sys.exit(f"no trials ran (exit code {base['exit_code']}): check `trt-routes plan` on such a project")
    gpus = ", ".join(sorted({g.get("gpu_name", "?") for g in env.gpus}))
    machine = f"{env.cpu.get('cpu_model')} ({env.cpu.get('cpu_count')} cores), {len(env.gpus)} GPU(s) {gpus}".strip()
    print(f"trial throughput, backend {args.backend}, {machine}, Python {platform.python_version()}")
    print(f"{'workers':>9} {'trials':>6} {'wall s':>8} {'trials/s':>9} {'vs 1 worker':>11} {'busy s':>8}  per worker")
    for r in sorted(rows, key=lambda r: (r["workers"], not r["pinned"])):
        ratio = r["trials_per_s"] / base["trials_per_s"]
        label = f"{r['workers']}{'' if r['pinned'] else ' unpin'}{' own' if r.get('own_caches') else ''}"
        print(f"{label:>9} {r['trials']:>6} {r['wall_s']:>8.1f} {r['trials_per_s']:>9.3f} {ratio:>10.2f}x "
              f"{r['busy_s']:>8.1f}  {r['by_worker']}")
    best = max(r["trials_per_s"] for r in rows if r["workers"] == 2 and r["pinned"]) / base["trials_per_s"] if any(
        r["workers"] == 2 and r["pinned"] for r in rows) else float("nan")
    print(f"2 workers vs 1: {best:.2f}x (target >= {TARGET_RATIO}x with two GPUs)")
    for r in rows:
        print(f"  workers={r['workers']}: exit {r['exit_code']}, statuses {r['statuses']}, winners {r['routes']}")
    if args.json:
        args.json.write_text(json.dumps({"backend": args.backend, "machine": machine, "rows": rows,
                                         "ratio_2_vs_1": best}, indent=2, default=str))


if __name__ == "__main__":
    main()
