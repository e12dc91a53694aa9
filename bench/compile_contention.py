"""Benchmark: what one Inductor build + measurement costs alone, and beside a second one on another GPU
(issue 8's scaling ceiling on one host), with and without pinning each process to its share of the cores.

Plain torch, no trt-routes workers: each process compiles the scaling benchmark's MLP ``--builds`` times
(caches disabled, so every build compiles) and times 50 runs of it. Configurations: ``solo`` (one process,
GPU 0), ``pair`` (GPUs 0 and 1 at once), ``pair-pinned`` (the same, each process bound to the cores apply
gives a GPU worker: ``trt_routes.execute.pool.pin_gpu_slots``). Prints the median build and run time per
configuration and the ratio to ``solo``: a ratio near 1 means two workers can reach ~2x; the per-build
slowdown caps what any executor gets from a second GPU.

Run: python bench/compile_contention.py [--builds 6]"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trt_routes.execute.pool import Slot, pin_gpu_slots  # noqa: E402


def cores_for(gpus: list[int]) -> list[list[int]]:
    """The cores apply binds a worker for each of ``gpus`` to when they run side by side."""
    slots = [Slot(f"gpu{g}", {}, {"CUDA_VISIBLE_DEVICES": str(g)}) for g in gpus]
    return [sorted(slot.cpus or ()) for slot in pin_gpu_slots(slots)]


def child(gpu: int, builds: int, cpus: list[int] | None, out: str) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"ind{gpu}-")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"tri{gpu}-")
    if cpus:
        os.sched_setaffinity(0, cpus)
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(len(cpus))
    import torch
    from torch import nn

    torch._inductor.config.force_disable_caches = True
    width = 1024
    model = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.LayerNorm(width),
                          nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)).cuda().half()
    x = torch.randn(64, width, device="cuda", dtype=torch.half)
    build, run = [], []
    for i in range(builds):
        torch._dynamo.reset()
        t0 = time.perf_counter()
        f = torch.compile(model, options={"aggressive_fusion": bool(i % 2)})
        f(x)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        for _ in range(50):
            f(x)
        torch.cuda.synchronize()
        build.append(t1 - t0)
        run.append(time.perf_counter() - t1)
    Path(out).write_text(json.dumps({"build": build[1:], "run": run[1:]}))  # the first pays imports


def config(name: str, gpus: list[int], builds: int, pin: bool) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    outs, procs = [], []
    pinned = cores_for(gpus) if pin else [None] * len(gpus)
    for gpu, cpus in zip(gpus, pinned, strict=True):
        out = tempfile.mktemp(suffix=".json")
        outs.append(out)
        procs.append(ctx.Process(target=child, args=(gpu, builds, cpus, out)))
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    data = [json.loads(Path(o).read_text()) for o in outs]
    return {"name": name, "build_s": statistics.median(b for d in data for b in d["build"]),
            "run_s": statistics.median(r for d in data for r in d["run"]), "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--builds", type=int, default=6)
    args = ap.parse_args()
    print(f"cores {len(os.sched_getaffinity(0))}; pinned side by side, GPUs 0 and 1 get {cores_for([0, 1])}",
          flush=True)
    rows = [config("solo", [0], args.builds, False), config("pair", [0, 1], args.builds, False),
            config("pair-pinned", [0, 1], args.builds, True), config("solo-pinned", [0], args.builds, True)]
    solo = rows[0]
    print(f"{'config':<12} {'build s (median)':>17} {'vs solo':>8} {'50 runs s':>10} {'vs solo':>8} {'wall s':>7}")
    for r in rows:
        print(f"{r['name']:<12} {r['build_s']:>17.3f} {r['build_s'] / solo['build_s']:>7.2f}x {r['run_s']:>10.4f} "
              f"{r['run_s'] / solo['run_s']:>7.2f}x {r['wall_s']:>7.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
