"""Benchmark: trt-routes' own overhead.

1. A synthetic cache of 50,000 trials over 200 jobs (20 models x 10 shapes, 250 routes each), once per
   built-in strategy (fast, full, mixed, adaptive; ``--strategies``): time a no-op `plan` and a no-op `apply`
   (everything cached and locked). Every trial's engine is one real ONNX Runtime engine of the model, so the
   first apply's side-by-side confirmation really runs (and is stored), as it does for a user. Targets:
   < 1 s each (issue 2), < 0.5 s with adaptive (issue 20).
2. The repo's quickstart (real ONNX Runtime trials): the tool's overhead per trial, i.e. the wall time
   of each trial as the coordinator sees it minus the build and measure time inside the worker, as a
   share of the trial's wall time. Target: < 5%. Measured twice in the same run: as apply runs
   (a route the search wants anyway queued behind the running trial) and with every trial dispatched
   only after the previous result is recorded (the way apply worked before; the reference line).

Prints a table with ratios against those targets (the baselines the issue names).
Run: python bench/plan_overhead.py [--models 20] [--shapes 10] [--only JOB] [--group EXPR]
(``--only``/``--group`` shrink the quickstart part: some of its jobs, another switch group.)"""

from __future__ import annotations

import argparse
import hashlib
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trt_routes.cache import TrialRecord  # noqa: E402
from trt_routes.execute.local import LocalExecutor  # noqa: E402
from trt_routes.jobs import Job  # noqa: E402
from trt_routes.plan import JobPlan, Plan  # noqa: E402
from trt_routes.project import open_project  # noqa: E402
from trt_routes.search import Outcome, make_search  # noqa: E402
from trt_routes.signature import cpu_fields  # noqa: E402
from trt_routes.tune.apply import ApplyOptions, SilentReporter, apply, compute_plan  # noqa: E402

GROUP = ("-graph_optimization_level=[disabled|basic|extended|layout|all] -intra_op_num_threads=[1|2|3|4|5] "
         "-allow_spinning=[0|1] -inter_op_num_threads=[1|2|3|4|5]")


STRATEGIES = ("full", "fast", "mixed", "adaptive")


def synthetic_project(root: Path, models: int, shapes: int, mode: str = "full") -> Path:
    (root / "m").mkdir(parents=True)
    src = REPO / "recipes" / "quickstart" / "resnet_like.onnx"
    # the confirmation a user gets (default rounds and candidates), on turns of a few runs: engines are tiny
    strategy = {"mode": mode, "confirm": {"iterations": 2, "slot_ms": 0}}
    data: dict[str, Any] = {
        "schema_version": 1, "switch_groups": {"g": GROUP}, "strategies": {"full": strategy},
        "measurement": {"warmup": 1, "iterations": 2, "repeats": 2},
        "tolerances": {"t": {"checks": [{"metric": "cos", "threshold": 1e-4}, {"metric": "lInf", "threshold": 1e-2}]}},
        "defaults": {"switch_group": "g", "strategy": "full", "tolerance": "t"}, "models": {},
    }
    import onnx

    base = onnx.load(str(src))
    for i in range(models):
        base.doc_string = f"synthetic copy {i}"  # a distinct model digest per copy
        onnx.save(base, str(root / "m" / f"m{i}.onnx"))
        data["models"][f"m{i}"] = {"path": f"m/m{i}.onnx",
                                   "shapes": {f"bs{b + 1}": {"input": [b + 1, 3, 32, 32]} for b in range(shapes)}}
    path = root / "tuning.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def synthetic_median(route: str) -> float:
    """A fixed median per route, 1.0 to 1.25 ms; the default route is the fastest (1.0), so a few routes
    within its noise are challengers the confirmation re-measures."""
    return 1.0 + (int(hashlib.sha256(route.encode()).hexdigest()[:8], 16) % 250) / 1000 if route else 1.0


def synthetic_outcome(route: str) -> Outcome:
    med = synthetic_median(route)
    return Outcome(ok=True, median_ms=med, ci_low=med * 0.99, ci_high=med * 1.01)


def fill_cache(manifest: Path, mode: str = "full") -> int:
    """Write one ok trial per (job, candidate route) straight into the cache, sharing one engine blob: a real
    ONNX Runtime engine of the model (its default route), so re-measurements load and time it."""
    from trt_routes.backends.onnxruntime import OnnxRuntimeBackend

    project = open_project(manifest)
    first = project.jobs[0]
    engine = manifest.parent / "engine.onnx"
    OnnxRuntimeBackend().build(first.build_spec({}), engine)
    engine_sha = project.store.put_file(engine)
    rows: list[TrialRecord] = []
    sigs: dict[str, dict[str, str]] = {}
    for job in project.jobs:
        assert job.expression is not None and job.catalog is not None and job.signature is not None
        sigs[job.signature.hash] = job.signature.fields
        parts: dict[str, Any] = dict(job.key_parts())
        routes = ["", *make_search("full", job.expression, job.catalog).candidates({})]
        # and every route the strategy itself measures (a dynamic one: each step, as it would walk them)
        search = make_search(mode, job.expression, job.catalog)
        known: dict[str, Outcome] = {"": synthetic_outcome("")}
        while batch := [r for r in search.next_batch(known) if r not in known]:
            known.update((r, synthetic_outcome(r)) for r in batch)
        routes += list(known)
        for route in dict.fromkeys(routes):
            med = synthetic_median(route)
            rows.append(TrialRecord(
                id=job.trial_id(route), group_key=job.group_key, job=job.name, route=route,
                signature=job.signature.hash, backend=job.backend, status="ok", median_ms=med,
                ci_low=med * 0.99, ci_high=med * 1.01, mean_ms=med, stdev_ms=0.01, samples=[med] * 100,
                losses={"logits": {"cos": 1e-7, "lInf": 1e-5, "l1": 1e-6, "l2": 1e-12,
                                   "l0@atol=1e-05,rtol=1e-05": 0.0}},
                build_s=0.01, measure_s=0.1, engine_sha256=engine_sha, **parts))
    with project.open_cache() as cache:
        return cache.add_trials(rows, sigs)


def best_of(fn: Any, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def noop_times(root: Path, models: int, shapes: int, mode: str) -> dict[str, float]:
    """The synthetic project with strategy ``mode``: filled, applied once (selection, real confirmation,
    lock), then the best of three no-op plans and no-op applies, each from a fresh ``open_project``."""
    manifest = synthetic_project(root, models, shapes, mode)
    t0 = time.perf_counter()
    n = fill_cache(manifest, mode)
    fill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    first = apply(open_project(manifest))  # reselect + confirm + lock + materialize, no builds
    first_s = time.perf_counter() - t0
    assert first.built == 0 and first.exit_code == 0, [o.error for o in first.outcomes][:3]
    remeasured = sum(1 for o in first.outcomes if o.selection is not None and o.selection.confirmation
                     and o.selection.confirmation.get("vs_default"))

    def noop_plan() -> Plan:
        project = open_project(manifest)  # fresh process state each time: load, resolve, diff
        with project.open_cache() as cache:
            plan = compute_plan(project, cache, project.read_lock())
        assert not plan.has_work, [(j.job.name, j.action, j.reasons) for j in plan.jobs if j.action != "up-to-date"][:3]
        return plan

    def noop_apply() -> None:
        result = apply(open_project(manifest))
        assert result.built == 0 and not result.lock_written
        assert all(isinstance(o.action, str) and o.action == "up-to-date" for o in result.outcomes)

    plan_s = best_of(noop_plan)
    apply_s = best_of(noop_apply)
    sample: JobPlan = noop_plan().jobs[0]
    return {"plan_s": plan_s, "apply_s": apply_s, "fill_s": fill_s, "first_s": first_s, "trials": n,
            "jobs": len(first.plan.jobs), "reused": sample.reused, "remeasured": remeasured}


class Clock(SilentReporter):
    """Timestamps each finished trial so per-trial wall time can be compared with worker time."""

    def __init__(self) -> None:
        self.events: list[tuple[float, TrialRecord, str]] = []
        self.job_started: dict[str, float] = {}

    def job_start(self, job: Job, builds: int) -> None:
        self.job_started[job.name] = time.perf_counter()

    def trial_done(self, job: Job, trial: TrialRecord) -> None:
        self.events.append((time.perf_counter(), trial, job.name))


class OneAtATime(LocalExecutor):
    """The local executor without a queued task: each trial dispatched after the previous is recorded."""

    def queue_room(self, target: Any) -> int:
        return 0


def quickstart_overhead(tmp: Path, queue: bool = True, only: list[str] | None = None,
                        group: str | None = None) -> dict[str, float]:
    """``only``: these of the quickstart's jobs (default: all); ``group``: this tuning expression for every
    switch group of the quickstart (default: its own)."""
    dest = tmp / f"quickstart-{'queued' if queue else 'serial'}"
    dest.mkdir()
    shutil.copy(REPO / "tuning.yaml", dest / "tuning.yaml")
    if group:
        data = yaml.safe_load((dest / "tuning.yaml").read_text())
        data["switch_groups"] = {name: group for name in data["switch_groups"]}
        (dest / "tuning.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copytree(REPO / "recipes" / "quickstart", dest / "recipes" / "quickstart")
    clock = Clock()
    t0 = time.perf_counter()
    result = apply(open_project(dest / "tuning.yaml"), ApplyOptions(only=list(only or [])), clock,
                   executor_factory=None if queue else OneAtATime)
    wall = time.perf_counter() - t0
    assert result.exit_code == 0
    shares, per_trial_overhead, spans = [], [], []
    prev_by_job: dict[str, float] = {}
    for stamp, trial, job in clock.events:
        start = prev_by_job.get(job)
        prev_by_job[job] = stamp
        if start is None:  # the first trial of a job also pays for the reference run: skip it
            continue
        inside = (trial.build_s or 0) + (trial.measure_s or 0)
        span = stamp - start
        per_trial_overhead.append(span - inside)
        shares.append((span - inside) / span)
        spans.append(span)
    inside_total = sum((t.build_s or 0) + (t.measure_s or 0) for _, t, _ in clock.events)
    return {"trials": len(clock.events), "median_share": statistics.median(shares),
            "mean_overhead_ms": statistics.fmean(per_trial_overhead) * 1e3,
            "total_share": sum(per_trial_overhead) / sum(spans),
            "p90_share": sorted(shares)[int(0.9 * (len(shares) - 1))],
            "median_overhead_ms": statistics.median(per_trial_overhead) * 1e3,
            "median_trial_ms": statistics.median(
                (t.build_s or 0) * 1e3 + (t.measure_s or 0) * 1e3 for _, t, _ in clock.events),
            "whole_run_share": (wall - inside_total) / wall, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--shapes", type=int, default=10)
    ap.add_argument("--only", action="append", default=[], metavar="JOB",
                    help="quickstart part: only this job (repeatable; default: every job)")
    ap.add_argument("--group", default=None, metavar="EXPR",
                    help="quickstart part: this tuning expression instead of its switch group")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="built-in strategies to time no-op "
                    "plan/apply with (comma-separated)")
    args = ap.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        fill_s, n, jobs, reused = 0.0, 0, 0, 0
        for mode in args.strategies.split(","):
            t = noop_times(tmp / mode, args.models, args.shapes, mode)
            fill_s, n, jobs, reused = t["fill_s"], int(t["trials"]), int(t["jobs"]), int(t["reused"])
            goal = 0.5 if mode == "adaptive" else 1.0
            label = "" if mode == "full" else f" ({mode})"  # full: the rows issue 2's table always had
            rows.append((f"no-op plan{label}, {n} trials / {jobs} jobs", f"{t['plan_s']:.3f} s", f"{goal:g} s",
                         f"{t['plan_s'] / goal:.2f}"))
            rows.append((f"no-op apply{label}, same cache", f"{t['apply_s']:.3f} s", f"{goal:g} s",
                         f"{t['apply_s'] / goal:.2f}"))
            rows.append((f"  first apply ({mode}): select, confirm ({int(t['remeasured'])} re-measured), lock",
                         f"{t['first_s']:.1f} s", "(info)", "-"))
        sample_reused = reused
        serial = quickstart_overhead(tmp, queue=False, only=args.only, group=args.group)
        q = quickstart_overhead(tmp, only=args.only, group=args.group)
        rows.append((f"quickstart overhead per trial (median of {q['trials']} trials)",
                     f"{q['median_share'] * 100:.1f}% ({q['median_overhead_ms']:.1f} ms of "
                     f"{q['median_trial_ms'] + q['median_overhead_ms']:.0f} ms)", "5%",
                     f"{q['median_share'] / 0.05:.2f}"))
        rows.append(("quickstart overhead per trial, p90", f"{q['p90_share'] * 100:.1f}%", "5%",
                     f"{q['p90_share'] / 0.05:.2f}"))
        rows.append(("quickstart overhead, all trials together (sum / sum)",
                     f"{q['total_share'] * 100:.1f}% (mean {q['mean_overhead_ms']:.2f} ms per trial)", "5%",
                     f"{q['total_share'] / 0.05:.2f}"))
        rows.append((f"  reference: one trial at a time (median of {serial['trials']})",
                     f"median {serial['median_share'] * 100:.1f}% ({serial['median_overhead_ms']:.1f} ms), "
                     f"all {serial['total_share'] * 100:.1f}% (mean {serial['mean_overhead_ms']:.2f} ms)", "-",
                     f"queued/serial mean overhead {q['mean_overhead_ms'] / serial['mean_overhead_ms']:.2f}"))
        rows.append(("quickstart whole run incl. start-up and references",
                     f"{q['whole_run_share'] * 100:.1f}% of {q['wall_s']:.1f} s", "(info)", "-"))
    print(f"machine: {cpu_fields()['cpu_model']}, {cpu_fields()['cpu_count']} cores, "
          f"Python {platform.python_version()}; synthetic cache filled in {fill_s:.1f} s; "
          f"{sample_reused} cached routes per job")
    width = max(len(r[0]) for r in rows)
    vw, tw = max(len(r[1]) for r in rows), max(len(r[2]) for r in rows)
    print(f"{'measure':<{width}}  {'result':<{vw}}  {'target':<{tw}}  ratio (result/target; < 1 meets it)")
    for name, value, target, ratio in rows:
        print(f"{name:<{width}}  {value:<{vw}}  {target:<{tw}}  {ratio}")


if __name__ == "__main__":
    main()
