"""trt-routes' locked route against what a PyTorch user would pick instead (issue 17): per model, in ONE
process, eager, torch.compile's default and each named mode (reduce-overhead, max-autotune,
max-autotune-no-cudagraphs) and the locked route, timed interleaved with CUDA events.

    python bench/gpu_speedup.py --recipe recipes/torch-gpu/modes --work /tmp/tune ...   # tune first
    python bench/gpu_vs_modes.py --work /tmp/tune --out results.json                   # then this

Each model runs in its own process (compilation of all models overlaps); the timing phases of the
processes are serialized by a file lock, so only one model is timed on the GPU at a time. Within a model,
rounds rotate through the variants (each turn: ``--iters`` back-to-back calls, their median); the ratio
of the tuned route to the best named mode is the median of per-round ratios, with a distribution-free
95% interval. The tuned route is the locked engine loaded by trt-routes' own backend
(``TorchInductorBackend.load`` with the job's build spec from the shard's tuning.yaml), as a user deploys
it: the recipe's kept compiled artifacts are restored in the route's cache scope (``compile_cache``) and
the model compiled as the build compiled it, so it runs the kernels the build chose; the table says
whether that compile was an FX-graph cache hit. (Compiling the bench's own copy of the model with the
recipe's ``inductor_config`` is not the same graph, so it misses and autotunes again: the 2026-12-01
third run.) ``--wait-lock S``: wait up to S seconds for the tuning's lock (tuning and this script
started together)."""

from __future__ import annotations

import argparse
import copy
import fcntl
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "torch-gpu" / "modes"
MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
LOCK = "/tmp/trt-routes-gpu-vs-modes.lock"


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    sys.path.insert(0, str(REPO))
    from trt_routes.selection import median_interval as mi

    return mi(values, confidence)


def locked_route(work: Path, job: str, wait_s: float) -> dict[str, Any] | None:
    """The lock entry of ``job`` in any shard under ``work`` (waiting up to ``wait_s``), with the engine
    recipe's inductor config."""
    deadline = time.time() + wait_s
    while True:
        for lock_path in sorted(work.glob("shard*/tuning.lock")):
            try:
                entry = (yaml.safe_load(lock_path.read_text()) or {}).get("jobs", {}).get(job)
            except Exception:
                entry = None
            if entry and entry.get("status", "ok") == "ok" and (entry.get("engine") or {}).get("path"):
                recipe = json.loads((lock_path.parent / entry["engine"]["path"]).read_text())
                return {"route": entry.get("route", ""), "inductor_config": recipe["inductor_config"],
                        "engine": str(lock_path.parent / entry["engine"]["path"]), "shard": str(lock_path.parent),
                        "kept_artifacts": {k: v for k, v in (recipe.get("compile_cache") or {}).items()
                                           if k != "data"},
                        "timing": entry.get("timing"), "trials": entry.get("trials"),
                        "confirmation": (entry.get("selection") or {}).get("confirmation")}
        if time.time() >= deadline:
            return None
        time.sleep(5)


def load_tuned(tuned: dict[str, Any], job: str) -> Any:
    """The locked engine as trt-routes' backend loads it (a TorchRunner: ``fn``, ``step_marker``,
    ``compile_cache``)."""
    sys.path.insert(0, str(REPO))
    from trt_routes.backends.torch_inductor import TorchInductorBackend
    from trt_routes.project import open_project
    from trt_routes.routes import parse_route

    project = open_project(Path(tuned["shard"]) / "tuning.yaml")
    spec = next(j for j in project.jobs if j.name == job).build_spec(parse_route(tuned["route"] or ""))
    return TorchInductorBackend().load(Path(tuned["engine"]), spec)


def run_model(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    sys.path.insert(0, str(args.recipe))
    import models  # the recipe's factories

    sys.path.insert(0, str(REPO))
    from trt_routes.backends.torch_inductor.runner import gpu_lock

    manifest = yaml.safe_load((args.recipe / "tuning.yaml").read_text())
    spec = manifest["models"][args.model]
    (shape_name, shapes), = spec["shapes"].items()
    target = next(iter(manifest["targets"]))
    job = f"{args.model}/{shape_name}/{target}"
    (input_name, dims), = shapes.items()
    torch.manual_seed(0)
    base = getattr(models, spec["entry"].split(":")[1])(shapes).eval().to("cuda", torch.float16)
    gen = torch.Generator(device="cuda").manual_seed(1)
    inp = spec.get("inputs", {}).get(input_name)
    if inp and inp["dtype"] == "int64":
        x = torch.randint(int(inp["low"]), int(inp["high"]), dims, device="cuda", generator=gen)
    else:
        x = torch.randn(dims, device="cuda", dtype=torch.float16, generator=gen)
    feeds = {input_name: x}
    variants: dict[str, Any] = {"eager": (base, False)}
    compile_s: dict[str, float] = {}
    errors: dict[str, str] = {}
    outputs: dict[str, Any] = {}
    #: a variant's own inputs where they differ from ``feeds``: the locked engine takes them as trt-routes'
    #: runner prepares them (with the model knob -channels_last=1, in channels_last, as a user deploys it)
    inputs_of: dict[str, dict[str, Any]] = {}

    def compile_variant(name: str, fn: Any, cudagraphs: bool) -> None:
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                for _ in range(3 if cudagraphs else 1):
                    if cudagraphs:
                        torch.compiler.cudagraph_mark_step_begin()
                    out = fn(**inputs_of.get(name, feeds))
            torch.cuda.synchronize()
            outputs[name] = out.float().clone()
            compile_s[name] = round(time.perf_counter() - t0, 1)
            variants[name] = (fn, cudagraphs)
        except Exception as exc:  # one mode failing must not lose the others
            errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(f"[{args.model}] {name}: {compile_s.get(name, 'failed')} s", flush=True)

    with torch.no_grad():
        outputs["eager"] = base(**feeds).float().clone()
    compile_variant("default", torch.compile(copy.deepcopy(base)), False)
    for mode in MODES:
        if mode in args.skip_modes:
            continue
        compile_variant(mode, torch.compile(copy.deepcopy(base), mode=mode), "no-cudagraphs" not in mode
                        and mode != "default")
    wait = args.wait_lock if not args.stop_at else max(0.0, min(args.wait_lock, args.stop_at - 75 - time.time()))
    tuned = locked_route(args.work, job, wait) if args.work else None
    if tuned is not None:
        t0 = time.perf_counter()
        try:
            runner = load_tuned(tuned, job)
            tuned["load"] = {**runner.compile_cache, "load_s": round(time.perf_counter() - t0, 1)}
            if runner.channels_last:
                inputs_of["trt-routes"] = {k: v.contiguous(memory_format=torch.channels_last)
                                           if v.dim() == 4 and v.is_floating_point() else v for k, v in feeds.items()}
            compile_variant("trt-routes", runner.fn, runner.step_marker)
        except Exception as exc:  # reported, the named modes still timed
            errors["trt-routes"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    else:
        errors["trt-routes"] = "no locked route"

    def cos(a: Any, b: Any) -> float:
        a, b = a.flatten().double(), b.flatten().double()
        return float(1 - (a @ b) / (a.norm() * b.norm() + 1e-30))

    accuracy = {n: cos(o, outputs["eager"]) for n, o in outputs.items() if n != "eager"}
    names = list(variants)
    slots: dict[str, list[float]] = {n: [] for n in names}
    # one model timed at a time on the GPU, and never while trt-routes times a trial (its own GPU lock)
    with open(LOCK, "w") as lock, gpu_lock("cuda:0"):
        fcntl.flock(lock, fcntl.LOCK_EX)
        t_lock = time.perf_counter()
        with torch.no_grad():
            for n in names:  # warm-up
                fn, cg = variants[n]
                for _ in range(20):
                    if cg:
                        torch.compiler.cudagraph_mark_step_begin()
                    fn(**inputs_of.get(n, feeds))
            torch.cuda.synchronize()
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for n in order:
                    fn, cg = variants[n]
                    given = inputs_of.get(n, feeds)
                    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                              for _ in range(args.iters)]
                    torch.cuda.synchronize()
                    for start, end in events:
                        start.record()
                        if cg:
                            torch.compiler.cudagraph_mark_step_begin()
                        fn(**given)
                        end.record()
                    torch.cuda.synchronize()
                    slots[n].append(statistics.median(s.elapsed_time(e) for s, e in events))
        timing_s = time.perf_counter() - t_lock
    med = {n: statistics.median(v) for n, v in slots.items()}
    named = [m for m in MODES if m in med]
    best = min(named, key=lambda m: med[m]) if named else None
    result: dict[str, Any] = {"model": args.model, "job": job, "input": {input_name: dims}, "median_ms": med,
                              "slots_ms": slots, "compile_s": compile_s, "errors": errors,
                              "cos_vs_eager_fp16": accuracy, "best_mode": best, "timing_s": round(timing_s, 1),
                              "tuned": tuned, "gpu": torch.cuda.get_device_name(0),
                              "torch": torch.__version__}
    if best is not None and "trt-routes" in med:
        ratios = [b / t for b, t in zip(slots[best], slots["trt-routes"], strict=True)]
        m, lo, hi = median_interval(ratios)
        result["speedup_vs_best_mode"] = {"median": m, "ci95": [lo, hi], "rounds": len(ratios)}
    if "eager" in med and "trt-routes" in med:
        result["speedup_vs_eager"] = med["eager"] / med["trt-routes"]
    return result


def table(results: list[dict[str, Any]], tune_wall_s: float | None) -> str:
    lines = [f"{'model':<14} {'eager':>7} {'default':>8} {'r-o':>7} {'max-at':>7} {'mat-nocg':>8} "
             f"{'tuned':>7}  {'best mode':<26} {'tuned/best (95% CI)':<24} {'max-at compile s':>16}  route"]
    ratios = []
    for r in results:
        med = r.get("median_ms", {})

        def ms(n: str, med: dict[str, float] = med) -> str:
            return f"{med[n]:.3f}" if n in med else "-"

        sp = r.get("speedup_vs_best_mode")
        if sp:
            ratios.append(sp["median"])
        lines.append(f"{r['model']:<14} {ms('eager'):>7} {ms('default'):>8} {ms('reduce-overhead'):>7} "
                     f"{ms('max-autotune'):>7} {ms('max-autotune-no-cudagraphs'):>8} {ms('trt-routes'):>7}  "
                     f"{r.get('best_mode')!s:<26} "
                     + (f"{sp['median']:.3f}x ({sp['ci95'][0]:.3f}-{sp['ci95'][1]:.3f})" if sp else "no route")
                     .ljust(24)
                     + f" {r.get('compile_s', {}).get('max-autotune', float('nan')):>16}  "
                     f"{(r.get('tuned') or {}).get('route', '-') or 'default'}  "
                     f"{(r.get('tuned') or {}).get('load', '')}")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    lines.append(f"geomean tuned/best named mode: {geo:.3f}x over {len(ratios)} of {len(results)} models "
                 f"(target >= 1.10x, none < 0.98x, every job a route); tuning wall {tune_wall_s} s")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", type=Path, default=RECIPE)
    ap.add_argument("--work", type=Path, help="gpu_speedup.py's work folder (shard*/tuning.lock)")
    ap.add_argument("--model", help="one model (a worker process); default: every model, in parallel")
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--wait-lock", type=float, default=0.0)
    ap.add_argument("--tune-wall-s", type=float)
    ap.add_argument("--skip-modes", nargs="*", default=[], choices=MODES,
                    help="named modes not compiled or timed (their autotuning would share the GPU with a tuning "
                         "that runs beside this script); the best named mode is then the best of the others")
    ap.add_argument("--budget", type=float, default=0.0, help="seconds for the whole run: waiting for a lock "
                    "stops 75 s before, and models not done by then are reported as unfinished")
    ap.add_argument("--stop-at", type=float, default=0.0, help=argparse.SUPPRESS)  # a worker's absolute deadline
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.model:
        result = run_model(args)
        assert args.out is not None
        args.out.write_text(json.dumps(result, indent=1, default=str))
        return 0
    manifest = yaml.safe_load((args.recipe / "tuning.yaml").read_text())
    names = args.models or list(manifest["models"])
    out_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "gpu_vs_modes_parts"
    out_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    stop_at = time.time() + args.budget if args.budget else 0.0
    for name in names:
        (out_dir / f"{name}.json").unlink(missing_ok=True)  # no stale part of an earlier run
        cmd = [sys.executable, __file__, "--model", name, "--recipe", str(args.recipe), "--rounds",
               str(args.rounds), "--iters", str(args.iters), "--wait-lock", str(args.wait_lock),
               "--out", str(out_dir / f"{name}.json"), "--stop-at", str(stop_at)]
        if args.work:
            cmd += ["--work", str(args.work)]
        if args.skip_modes:
            cmd += ["--skip-modes", *args.skip_modes]
        procs.append((name, subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"})))
    results = []
    for name, p in procs:
        path = out_dir / f"{name}.json"
        try:
            p.wait(timeout=max(1.0, stop_at - time.time()) if stop_at else None)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            print(f"[{name}] not done within --budget: stopped", flush=True)
        results.append(json.loads(path.read_text()) if path.is_file() else {"model": name, "errors":
                                                                              {"process": f"exit {p.returncode}"}})
    text = table(results, args.tune_wall_s)
    print(text)
    if args.out:
        args.out.write_text(json.dumps({"results": results, "table": text}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
