"""Benchmark: what one Inductor build + measurement costs alone, and beside a second one on another GPU
(issue 8's scaling ceiling on one host), with and without pinning each process to its share of the cores.

Plain torch, no trt-routes: each process compiles the scaling benchmark's MLP ``--builds`` times (caches
disabled, so every build compiles) and times 50 runs of it. Configurations: ``solo`` (one process, GPU 0),
``pair`` (GPUs 0 and 1 at once), ``pair-pinned`` (the same, each process bound to the cores nearest its GPU,
from sysfs, else half of the cores). Prints the median build and run time per configuration and the ratio
to ``solo``: a ratio near 1 means two workers can reach ~2x; the per-build slowdown caps what any executor
gets from a second GPU.

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


def gpu_local_cpus(index: int) -> list[int] | None:
    """The CPUs sysfs lists as local to GPU ``index`` (by NVML's PCI bus id), or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        bus = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        pynvml.nvmlShutdown()
        text = Path(f"/sys/bus/pci/devices/{bus[-12:].lower()}/local_cpulist").read_text().strip()
    except Exception:
        return None
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


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
    n_cpu = len(os.sched_getaffinity(0))
    for k, gpu in enumerate(gpus):
        cpus = None
        if pin:
            half = sorted(os.sched_getaffinity(0))[k * n_cpu // len(gpus):(k + 1) * n_cpu // len(gpus)]
            cpus = gpu_local_cpus(gpu) or half
            others = [gpu_local_cpus(g) for g in gpus if g != gpu]
            if cpus and others and others[0] == cpus:  # both GPUs on one node: split its cores
                cpus = cpus[k * len(cpus) // len(gpus):(k + 1) * len(cpus) // len(gpus)]
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
    print(f"cores {len(os.sched_getaffinity(0))}; GPU 0 local cpus {gpu_local_cpus(0)}; "
          f"GPU 1 local cpus {gpu_local_cpus(1)}", flush=True)
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
