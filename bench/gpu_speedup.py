"""GPU evidence for the torch-inductor backend: run `trt-routes apply` on recipes/torch-gpu and report,
per model, the default and chosen latency, the speedup with its interval, builds spent and wall time,
plus geometric means per mode against the issue's targets (jit >= 1.5x, aot >= 1.15x over the default).

Models run as parallel shards (one project folder each, so each has its own cache and lock); timing on
one GPU is serialized across processes by the backend, compilation overlaps. Optionally exports one
job's trials as a landscape file (trt-routes/landscape@1) for the search benchmark.

    python bench/gpu_speedup.py --work /tmp/gpu --parallel 4 --out results.json \\
        --landscape encoder/bs8-s128/h200=landscape.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"jit": 1.5, "aot": 1.15}


def shard_models(models: list[str], parallel: int, split_modes: bool = False) -> list[list[str]]:
    """Models in round-robin shards, a model's jit and aot variants kept together unless ``split_modes``
    (then every model gets its own worker process)."""
    families: dict[str, list[str]] = {}
    for m in models:
        families.setdefault(m if split_modes else m.removesuffix("-aot"), []).append(m)
    shards: list[list[str]] = [[] for _ in range(max(1, min(parallel, len(families))))]
    for i, members in enumerate(families.values()):
        shards[i % len(shards)].extend(members)
    return [s for s in shards if s]


def prepare(recipe: Path, work: Path, shards: list[list[str]], groups: dict[str, str],
            measurement: dict[str, Any], strategies: dict[str, str], resume: bool = False) -> list[Path]:
    """One project folder per shard: the recipe's files and a manifest holding only the shard's models.
    ``resume``: a shard folder already there is kept as it is (apply continues from its cache and lock)."""
    manifest = yaml.safe_load((recipe / "tuning.yaml").read_text())
    manifest["switch_groups"].update(groups)
    manifest["measurement"].update(measurement)
    for model, mode in strategies.items():
        manifest["strategies"].setdefault(mode, {"mode": mode})
        manifest["models"][model]["strategy"] = mode
    folders = []
    for i, models in enumerate(shards):
        folder = work / f"shard{i}"
        if resume and (folder / "tuning.yaml").exists():  # an earlier run's project: its cache continues
            folders.append(folder)
            continue
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(recipe, folder, ignore=shutil.ignore_patterns("caches", "engines", "tuning.lock",
                                                                      "__pycache__"))
        data = dict(manifest, models={m: manifest["models"][m] for m in models})
        (folder / "tuning.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        folders.append(folder)
    return folders


def run_shards(folders: list[Path], deadline_s: float, threads: int) -> dict[str, float]:
    """Start `trt-routes apply` in every folder; interrupt whatever runs past the deadline."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1",  # a segfault names its frame
           "TORCHINDUCTOR_COMPILE_THREADS": str(threads)}
    procs = {}
    start = time.perf_counter()
    for folder in folders:
        log = (folder / "apply.log").open("w")
        procs[folder] = (subprocess.Popen([sys.executable, "-m", "trt_routes.cli.app", "apply", "--keep-going"],
                                          cwd=folder, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True), time.perf_counter())
    walls: dict[str, float] = {}
    interrupted = False
    while any(p.poll() is None for p, _ in procs.values()):
        if not interrupted and time.perf_counter() - start > deadline_s:
            interrupted = True
            print(f"deadline of {deadline_s:.0f} s reached: interrupting unfinished shards", flush=True)
            for p, _ in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGINT)
            grace = time.perf_counter() + 30
            while any(p.poll() is None for p, _ in procs.values()) and time.perf_counter() < grace:
                time.sleep(0.5)
            for p, _ in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
        for folder, (p, t0) in procs.items():
            if p.poll() is not None and str(folder) not in walls:
                walls[str(folder)] = time.perf_counter() - t0
        time.sleep(0.5)
    for folder, (_p, t0) in procs.items():
        walls.setdefault(str(folder), time.perf_counter() - t0)
    return walls


def collect(folder: Path) -> list[dict[str, Any]]:
    """Per job of one shard: lock entry (if selection finished) and every trial from the cache."""
    from trt_routes.cache import CacheStore

    lock_path = folder / "tuning.lock"
    lock = (yaml.safe_load(lock_path.read_text()) or {}).get("jobs", {}) if lock_path.exists() else {}
    cache_path = folder / "caches" / "trials.sqlite"
    rows = []
    manifest = yaml.safe_load((folder / "tuning.yaml").read_text())
    with CacheStore(cache_path) as cache:
        for model, spec in manifest["models"].items():
            for shape in spec["shapes"]:
                for target in spec.get("targets") or manifest["defaults"].get("targets") or ["cpu"]:
                    job = f"{model}/{shape}/{target}"
                    trials = {t.route: t for t in cache.trials_for_job(job)}
                    rows.append(summarize(job, model, spec, lock.get(job), trials) | {"shard": str(folder)})
    return rows


def summarize(job: str, model: str, spec: dict[str, Any], entry: dict[str, Any] | None,
              trials: dict[str, Any]) -> dict[str, Any]:
    mode = (spec.get("settings") or {}).get("mode", "jit")
    default = trials.get("")
    row: dict[str, Any] = {
        "job": job, "model": model.removesuffix("-aot"), "mode": mode, "builds": len(trials),
        "build_s": round(sum(t.build_s or 0 for t in trials.values()), 1),
        "trials": [{"route": r, "status": t.status, "median_ms": t.median_ms, "ci_ms": [t.ci_low, t.ci_high],
                    "build_s": t.build_s, "error": (t.error or "")[:300]} for r, t in sorted(trials.items())],
    }
    if entry is None or default is None or default.median_ms is None:
        ok = [t for t in trials.values() if t.status == "ok" and t.median_ms]
        row.update(status="unfinished", default_ms=default.median_ms if default else None,
                   best_seen_ms=min((t.median_ms for t in ok), default=None))
        return row
    chosen = trials[entry["route"]]
    speedup = default.median_ms / chosen.median_ms
    low = default.ci_low / chosen.ci_high if chosen.ci_high and default.ci_low else None
    high = default.ci_high / chosen.ci_low if chosen.ci_low and default.ci_high else None
    row.update(status="ok", route=entry["route"], default_ms=default.median_ms,
               default_ci=[default.ci_low, default.ci_high], chosen_ms=chosen.median_ms,
               chosen_ci=[chosen.ci_low, chosen.ci_high], speedup=speedup, speedup_interval=[low, high])
    return row


def landscape(folder: Path, job_name: str) -> dict[str, Any]:
    """The job's trials as a trt-routes/landscape@1 file (routes absent from it replay as crashed builds)."""
    from trt_routes.cache import CacheStore
    from trt_routes.project import open_project

    project = open_project(folder / "tuning.yaml")
    job = next(j for j in project.jobs if j.name == job_name)
    assert job.expression is not None and job.catalog is not None
    knobs = []
    for token in job.expression.varied:
        knob = job.catalog.get(token.option)
        assert knob is not None
        values = list(dict.fromkeys([knob.default, *token.values]))
        knobs.append({"option": token.option, "values": values, "default": knob.default})
    routes = []
    with CacheStore(project.cache_path) as cache:
        for t in sorted(cache.trials_for_job(job_name), key=lambda t: t.route):
            if t.group_key != job.group_key:
                continue
            losses = next(iter(t.losses.values()), {}) if t.losses else {}
            routes.append({"route": t.route, "status": t.status,
                           "samples_ms": [float(s) for s in t.samples] if t.status == "ok" else [],
                           "losses": {k: (v if v is not None and math.isfinite(v) else None)
                                      for k, v in losses.items() if k in ("cos", "lInf", "l1", "l2")},
                           "build_s": round(t.build_s or 0.0, 3)})
    sig = job.signature.fields if job.signature else {}
    return {"schema": "trt-routes/landscape@1", "backend": "torch-inductor", "knobs": knobs, "routes": routes,
            "meta": {"job": job_name, "gpu": sig.get("gpu_name"), "torch": sig.get("backend_version"),
                     "recorded": time.strftime("%Y-%m-%d"), "protocol": job.measurement.key_fields(),
                     "source": "bench/gpu_speedup.py (strategy full over the job's switch group)"}}


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def report(rows: list[dict[str, Any]], walls: dict[str, float]) -> str:
    lines = [f"{'model':<14} {'mode':<4} {'default ms':>11} {'chosen ms':>10} {'speedup':>8} "
             f"{'interval':>13} {'builds':>6} {'build s':>8} {'shard wall s':>12}  route"]
    for r in sorted(rows, key=lambda r: (r["mode"], r["model"])):
        wall = walls.get(r["shard"], float("nan"))
        if r["status"] != "ok":
            lines.append(f"{r['model']:<14} {r['mode']:<4} {_ms(r.get('default_ms')):>11} {'-':>10} "
                         f"{'-':>8} {'unfinished':>13} {r['builds']:>6} {r['build_s']:>8.0f} {wall:>12.0f}")
            continue
        lo, hi = r["speedup_interval"]
        interval = f"{lo:.2f}-{hi:.2f}" if lo and hi else "-"
        lines.append(f"{r['model']:<14} {r['mode']:<4} {r['default_ms']:>11.3f} {r['chosen_ms']:>10.3f} "
                     f"{r['speedup']:>7.2f}x {interval:>13} {r['builds']:>6} {r['build_s']:>8.0f} {wall:>12.0f}  "
                     f"{r['route'] or '(default)'}")
    for r in rows:
        for t in r["trials"]:
            if t["status"] != "ok":
                lines.append(f"  {r['job']} {t['route'] or '(default)'}: {t['status']} {t['error'][:160]}")
    for mode, target in TARGETS.items():
        done = [r["speedup"] for r in rows if r["mode"] == mode and r["status"] == "ok"]
        total = sum(1 for r in rows if r["mode"] == mode)
        g = geomean(done)
        verdict = "n/a" if g is None else ("meets" if g >= target else "misses")
        lines.append(f"geomean {mode}: {g:.2f}x over {len(done)}/{total} model(s); target >= {target}x "
                     f"(baseline: the default route, 1.00x): {verdict}" if g is not None else
                     f"geomean {mode}: no finished model")
    return "\n".join(lines)


def _ms(v: float | None) -> str:
    return f"{v:.3f}" if v else "-"


def gpu_name() -> str:
    try:
        import torch

        return str(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else "no CUDA GPU"
    except Exception as exc:
        return f"unknown ({exc})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", type=Path, default=REPO / "recipes" / "torch-gpu")
    ap.add_argument("--work", type=Path, default=Path("/tmp/trt-routes-gpu-bench"))
    ap.add_argument("--parallel", type=int, default=4, help="shards run at once (compilation overlaps)")
    ap.add_argument("--models", nargs="*", help="models of the recipe to run (default: all)")
    ap.add_argument("--split-modes", action="store_true", help="jit and aot variants in separate shards")
    ap.add_argument("--group", action="append", default=[], metavar="NAME=EXPR", help="override a switch group")
    ap.add_argument("--strategy", action="append", default=[], metavar="MODEL=MODE", help="override a strategy")
    ap.add_argument("--measure", default="", help="measurement overrides, e.g. iterations=20,repeats=3")
    ap.add_argument("--deadline", type=float, default=540.0, help="seconds before unfinished shards stop")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--resume", action="store_true", help="keep shard folders already under --work: apply "
                    "continues their search (an earlier call stopped at its deadline)")
    ap.add_argument("--landscape", default="", metavar="JOB=FILE", help="export JOB's trials as a landscape")
    args = ap.parse_args()

    manifest = yaml.safe_load((args.recipe / "tuning.yaml").read_text())
    models = args.models or list(manifest["models"])
    groups = dict(g.split("=", 1) for g in args.group)
    strategies = dict(s.split("=", 1) for s in args.strategy)
    measurement = {k: float(v) if "." in v else int(v)
                   for k, v in (kv.split("=") for kv in args.measure.split(",") if kv)}
    shards = shard_models(models, args.parallel, args.split_modes)
    args.work.mkdir(parents=True, exist_ok=True)
    folders = prepare(args.recipe, args.work, shards, groups, measurement, strategies, args.resume)
    threads = max(1, (os.cpu_count() or 2) // len(folders))
    print(f"{gpu_name()}; {len(folders)} shard(s): {shards}; {threads} compile thread(s) each", flush=True)
    t0 = time.perf_counter()
    walls = run_shards(folders, args.deadline, threads)
    total = time.perf_counter() - t0
    rows = [row for f in folders for row in collect(f)]
    table = report(rows, walls)
    print(table)
    print(f"total wall {total:.0f} s; {sum(r['builds'] for r in rows)} build(s)")
    result = {"gpu": gpu_name(), "date": time.strftime("%Y-%m-%d %H:%M"), "wall_s": round(total, 1),
              "shards": shards, "shard_wall_s": walls, "rows": rows, "table": table,
              "groups": {**manifest["switch_groups"], **groups}}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str))
    if args.landscape:
        job, _, path = args.landscape.partition("=")
        folder = Path(next(r["shard"] for r in rows if r["job"] == job))
        try:
            data = landscape(folder, job)
            from trt_routes.backends.landscape import dump, validate

            validate(data, path)
            Path(path).write_text(dump(data))
            print(f"landscape of {job}: {len(data['routes'])} route(s) -> {path}")
        except Exception as exc:  # the speedup results above stay valid without it
            print(f"landscape of {job} not written: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
