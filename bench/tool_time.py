"""Benchmark: the time a user waits (issue 20).

In one invocation:

1. A fresh ``trt-routes apply`` of the quickstart (tuning.yaml and recipes/quickstart copied into a temporary
   project), as a subprocess, timed end to end, with ``TRT_ROUTES_TIMINGS`` set so apply logs its own events
   (``trt_routes.tune.apply.Timings``): the build and measure time of every trial, reference run and
   side-by-side re-measurement as the worker reports it, the plan, the executor, the lock writes.
2. A bare Python loop over the very routes that apply built, with the same protocol: per route one ONNX
   Runtime session built and loaded through ``trt_routes.backends.onnxruntime`` (the same engines), then
   the measurement protocol through its own function (``execute.protocol.timed_samples``: the fixed warm-up,
   the warm-up until settled of ``measurement.settle``, the timed repeats). The same loop without the
   warm-up until settled (warmup, iterations, repeats alone) is reported beside it. No executor, cache,
   plan or confirmation; also a subprocess (interpreter and imports included), timed end to end.
3. The no-op ``plan`` and ``apply`` with ``adaptive`` on bench/plan_overhead.py's synthetic project
   (200 jobs, ~50k trials by default; real engines, so confirmation really happened): in one process, and
   as a user runs them, ``trt-routes plan`` and ``trt-routes apply`` in fresh processes (what the last line
   reports), beside the same commands with every plan derived in full (``TRT_ROUTES_SETTLED=off``, the
   baseline: how no-op plans worked before ``trt_routes.plan.settled``).
4. Optionally (``--aa-seeds N``) bench/search.py over the A/A landscapes (bench/landscapes/aa-*.json), the
   sequential confirmation as the worker runs it: the worst wrong-winner rate of the confirmed strategies.

Prints where apply's wall time goes, then as its LAST line::

    apply/bare=X.XX confirm_share=Y.YY outside_measurement=Z.ZZ noop_plan_adaptive_s=S.SS noop_apply_adaptive_s=T.TT

Both subprocesses run as on a user's machine: Python writes and reads its bytecode (``PYTHONDONTWRITEBYTECODE``,
set in some sandboxes and CI images, is removed from their environment, and one untimed import of every module
first writes the ``__pycache__`` files; without them each process compiled ~70 modules, 0.1 s, and the worker
as many again). ``--bytecode-off`` keeps the caller's setting. The commands run through a copy of the console script
pip writes (``CONSOLE_SCRIPT``, a file: a worker spawned from it sees a main module with a file, as a user's do).

The memo of derived facts (``trt_routes.files.memo``: ONNX Runtime's catalog, the models' graphs) is a folder of the
benchmark's own. By default it is primed, untimed, the way any earlier ``apply`` on this machine leaves it (the
quickstart's jobs resolved once, the memo saved): the state of a user's second project. ``--cold-memo`` gives
each timed process an empty one instead: a first ``apply`` on a fresh machine (the coordinator then imports onnx
and onnxruntime, ~0.04 s).

``confirm_share``: re-measurement time / apply's wall time; ``outside_measurement``: 1 - (trials' and
re-measurements' build + measure time) / apply's wall time (reference runs count as outside: the bare loop
needs none). ``--tiny``: two quickstart jobs, two knobs, a small measurement and a small synthetic project
(for CI). Run: python bench/tool_time.py [--tiny] [--repeat N] [--aa-seeds 200]"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TINY_GROUP = "-graph_optimization_level=[basic|all] -intra_op_num_threads=[1|2]"


def quickstart_copy(dest: Path, tiny: bool) -> Path:
    dest.mkdir(parents=True)
    shutil.copytree(REPO / "recipes" / "quickstart", dest / "recipes" / "quickstart")
    data = yaml.safe_load((REPO / "tuning.yaml").read_text())
    if tiny:
        data["switch_groups"] = {name: TINY_GROUP for name in data["switch_groups"]}
        data["measurement"].update(warmup=2, iterations=5, repeats=3)
        for strategy in data["strategies"].values():
            if strategy.get("confirm"):
                strategy["confirm"].update(rounds=5, iterations=5, slot_ms=2)
        data["models"] = {"resnet-like": {**data["models"]["resnet-like"],
                                          "shapes": {"bs1": data["models"]["resnet-like"]["shapes"]["bs1"]}}}
    (dest / "tuning.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return dest / "tuning.yaml"


#: Set by ``--bytecode-off``: the timed subprocesses keep the caller's PYTHONDONTWRITEBYTECODE.
KEEP_BYTECODE_SETTING = False
#: The memo folder (TRT_ROUTES_MEMO) of the timed subprocesses; None: the caller's.
MEMO: Path | None = None


def child_env(**extra: str) -> dict[str, str]:
    """The timed subprocesses' environment: this repo on PYTHONPATH, bytecode on as Python's default, the
    benchmark's memo folder."""
    env = {**os.environ, **({"TRT_ROUTES_MEMO": str(MEMO)} if MEMO is not None else {}), **extra,
           "PYTHONPATH": os.pathsep.join([str(REPO), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                                                       else [])])}
    if not KEEP_BYTECODE_SETTING:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def prime_memo(manifest: Path) -> None:
    """Untimed: resolve the project's jobs once and save the memo, as any earlier apply on the machine did."""
    code = ("import sys\nfrom trt_routes.files.memo import save\nfrom trt_routes.project import open_project\n"
            "open_project(sys.argv[1]).jobs\nsave()\n")
    subprocess.run([sys.executable, "-c", code, str(manifest)], env=child_env(), check=True)


def write_bytecode() -> None:
    """One untimed import of what apply, its worker and the bare loop import: the __pycache__ files a user's
    first run leaves (pip writes them for installed packages)."""
    modules = ["trt_routes.cli.app", "trt_routes.cli.tune", "trt_routes.tune.apply", "trt_routes.report.console",
               "trt_routes.execute.worker", "trt_routes.execute.local", "trt_routes.backends.onnxruntime",
               "trt_routes.plan.saved", "trt_routes.audit.explain", "trt_routes.project"]
    code = f"import importlib\nfor m in {modules!r}:\n    importlib.import_module(m)"
    subprocess.run([sys.executable, "-c", code], env=child_env(), check=True)


#: The ``trt-routes`` console script as pip writes it: a file that imports the CLI (a spawned worker sees
#: a main module with a file, which ``-c`` code does not have).
CONSOLE_SCRIPT = """import re
import sys
from trt_routes.cli.app import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def console_script(folder: Path) -> Path:
    """``folder/trt-routes``: the console script (``CONSOLE_SCRIPT``), run with this interpreter."""
    script = folder / "trt-routes"
    script.write_text(CONSOLE_SCRIPT)
    return script


def timed_apply(manifest: Path) -> tuple[float, list[dict[str, Any]]]:
    """(wall seconds of ``trt-routes apply`` as a subprocess, its timing events)."""
    log = manifest.parent / "timings.jsonl"
    env = child_env(TRT_ROUTES_TIMINGS=str(log))
    cmd = [sys.executable, str(console_script(manifest.parent.parent)), "apply", "--json"]
    launched = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=manifest.parent, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"trt-routes apply failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    events.insert(0, {"event": "launch", "t": launched})
    events.append({"event": "exit", "t": launched + wall})
    return wall, events


def built_routes(manifest: Path) -> list[tuple[str, str]]:
    """(job, route) of every trial the apply built, in the order it built them (read from its cache)."""
    from trt_routes.project import open_project

    con = sqlite3.connect(open_project(manifest).cache_path)
    try:
        return [(j, r) for j, r in con.execute("SELECT job, route FROM trials ORDER BY rowid")]
    finally:
        con.close()


def bare_loop_main(spec_path: Path) -> None:
    """The bare loop itself (run as ``tool_time.py --bare SPEC``): build, load, time each route."""
    import numpy as np

    from trt_routes.backends.onnxruntime import OnnxRuntimeBackend
    from trt_routes.execute.protocol import settle_spec, timed_samples
    from trt_routes.project import open_project
    from trt_routes.routes import route_dict

    spec = json.loads(spec_path.read_text())
    project = open_project(Path(spec["manifest"]))
    jobs = {j.name: j for j in project.jobs}
    backend = OnnxRuntimeBackend()
    out = Path(spec["work"])
    inside = 0.0
    for i, (name, route) in enumerate(spec["routes"]):
        job = jobs[name]
        m = job.measurement
        rng = np.random.default_rng(m.seed)
        feeds = {k: rng.uniform(-1, 1, size=[int(d) for d in v["shape"]]).astype(np.float32)
                 for k, v in sorted(job.inputs.items())}
        build_spec = job.build_spec(route_dict(route))
        engine = out / f"e{i}.onnx"
        t0 = time.perf_counter()
        backend.build(build_spec, engine)
        runner = backend.load(engine, build_spec)
        if spec["settle"]:  # the protocol's own code: fixed warm-up, warm-up until settled, timed repeats
            timed_samples(runner, feeds, m.warmup, m.iterations, m.repeats, settle_spec(m.settle))
        else:
            runner.time(feeds, m.warmup, m.iterations, m.repeats)
        del runner
        inside += time.perf_counter() - t0
    (out / "inside.json").write_text(json.dumps({"build_measure_s": inside}))


def timed_bare(manifest: Path, routes: list[tuple[str, str]], work: Path, settle: bool) -> tuple[float, float]:
    """(wall seconds of the bare loop's process, seconds inside its build+load+time calls). It runs under the
    worker's environment defaults (one OpenBLAS thread), as apply's trials do. ``settle``: the whole
    measurement protocol (``measurement.settle``'s warm-up until settled included), else warmup, iterations
    and repeats alone."""
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "bare.json"
    spec.write_text(json.dumps({"manifest": str(manifest), "routes": routes, "work": str(work), "settle": settle}))
    env = {"OPENBLAS_NUM_THREADS": "1", **child_env()}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--bare", str(spec)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bare loop failed:\n{proc.stderr[-3000:]}")
    return wall, float(json.loads((work / "inside.json").read_text())["build_measure_s"])


def breakdown(wall: float, events: list[dict[str, Any]]) -> dict[str, float]:
    """Where apply's wall time went, in seconds (see the module docstring)."""
    at = {e["event"]: e["t"] for e in events if e["event"] in ("launch", "apply_start", "plan_done",
                                                               "executor_ready", "jobs_done", "apply_end", "exit")}

    def s(key: str, kind: str) -> float:
        return sum(float(e.get(key) or 0.0) for e in events if e["event"] == kind)

    out = {
        "start-up (interpreter, imports, CLI, project load)": at["apply_start"] - at["launch"],
        "plan (cache, lock, diff)": at["plan_done"] - at["apply_start"],
        "executor start": at["executor_ready"] - at["plan_done"],
        "trials: build": s("build_s", "trial"),
        "trials: measure": s("measure_s", "trial"),
        "re-measurements (confirmation)": s("measure_s", "remeasure"),
        "references (inside the worker; worker start-up, if first, outside)": s("worker_s", "reference"),
        "lock writes": s("s", "lock_write"),
        "after the jobs (worker shut-down, settled plans)": max(0.0, at["apply_end"] - at["jobs_done"] - sum(
            float(e.get("s") or 0.0) for e in events if e["event"] == "lock_write" and "job" not in e)),
        "exit (after apply returns)": at["exit"] - at["apply_end"],
    }
    out["coordination (worker start-up, pipes, scheduling, bookkeeping)"] = wall - sum(out.values())
    return out


def noop_adaptive(tiny: bool) -> tuple[float, float, dict[str, float]]:
    """The no-op plan and apply on plan_overhead.py's synthetic project: in one process (its open_project
    and diff, best of three; what the last line reports, as the issue defines it), and as a user runs
    them: ``trt-routes plan`` and ``trt-routes apply`` in fresh processes (median of five), interpreter,
    imports and, for apply, the early worker included."""
    sys.path.insert(0, str(REPO / "bench"))
    import plan_overhead

    from trt_routes.plan.settled import OFF_VAR

    models, shapes = (2, 2) if tiny else (20, 10)
    with tempfile.TemporaryDirectory() as tmpdir:
        # one memo for the in-process applies and the commands: what an apply leaves for the next command (the
        # commands used to get the apply runs' memo folder, deleted by then: every `plan` read the 20 models'
        # graphs and imported onnx, which only apply remembers)
        memo = {"TRT_ROUTES_MEMO": str(Path(tmpdir) / "memo")}
        with mock.patch.dict(os.environ, memo):
            times = plan_overhead.noop_times(Path(tmpdir) / "project", models, shapes, "adaptive")
        manifest = Path(tmpdir) / "project" / "tuning.yaml"
        cli: dict[str, float] = {}
        script = console_script(Path(tmpdir))
        # the baseline in the same run: every job's plan derived in full, as before settled plans existed
        for way, extra in (("", {}), (" derived in full", {OFF_VAR: "off"})):
            for command in ("plan", "apply"):
                walls = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    proc = subprocess.run([sys.executable, str(script), command, "-m", str(manifest)],
                                          env=child_env(**memo, **extra), capture_output=True, text=True)
                    walls.append(time.perf_counter() - t0)
                    if proc.returncode != 0 or (command == "apply" and "nothing was built" not in proc.stdout):
                        raise SystemExit(f"no-op {command} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
                cli[command + way] = statistics.median(walls)
    return times["plan_s"], times["apply_s"], cli


ONNX_IMPORT = ("import time; t0 = time.perf_counter(); import onnx; t = time.perf_counter() - t0; "
               "import ml_dtypes, numpy; print(t, ml_dtypes.__version__, numpy.__version__)")


def onnx_import() -> tuple[float, str]:
    """``import onnx`` in a fresh process, median of three, and the ml_dtypes and numpy it imported: apply's
    first lock entry imports onnx (the ONNX engine's identity), so this is part of every fresh apply."""
    times, versions = [], ""
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", ONNX_IMPORT], env=child_env(), capture_output=True, text=True,
                              check=True)
        secs, ml, np_version = proc.stdout.split()
        times.append(float(secs))
        versions = f"ml_dtypes {ml}, numpy {np_version}"
    return statistics.median(times), versions


def aa_wrong(seeds: int) -> float:
    with tempfile.TemporaryDirectory() as tmpdir:
        for f in sorted((REPO / "bench" / "landscapes").glob("aa-*.json")):
            shutil.copy(f, Path(tmpdir) / f.name)
        proc = subprocess.run([sys.executable, str(REPO / "bench" / "search.py"), tmpdir, "--seeds", str(seeds),
                               "--strategies", "adaptive,fast,mixed,full"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench/search.py failed:\n{proc.stderr[-3000:]}")
    print(proc.stdout.rstrip())
    line = next(x for x in proc.stdout.splitlines() if x.startswith("aa_wrong_winner_max="))
    return float(line.split("=")[1].split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="few routes, a small measurement (CI)")
    ap.add_argument("--repeat", type=int, default=1, help="apply and bare loop pairs (each reported; the "
                    "last line uses their medians)")
    ap.add_argument("--aa-seeds", type=int, default=0, help="also run bench/search.py on the A/A landscapes")
    ap.add_argument("--noop-only", action="store_true", help="only the no-op commands (no last line)")
    ap.add_argument("--bare", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--bytecode-off", action="store_true", help="keep the caller's PYTHONDONTWRITEBYTECODE in "
                    "the timed subprocesses (default: Python's own, bytecode written and read)")
    ap.add_argument("--cold-memo", action="store_true", help="an empty memo of derived facts for each timed "
                    "process (a first apply on a fresh machine; default: primed, as any earlier apply leaves it)")
    args = ap.parse_args()
    if args.bare is not None:
        bare_loop_main(args.bare)
        return
    global KEEP_BYTECODE_SETTING, MEMO
    KEEP_BYTECODE_SETTING = args.bytecode_off
    write_bytecode()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"# bench/tool_time.py {'--tiny ' if args.tiny else ''}({stamp}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, bytecode "
          f"{'as the caller has it' if args.bytecode_off else 'on'}, memo {'cold' if args.cold_memo else 'primed'})")
    ratios, confirm, outside, plain_ratios = [], [], [], []
    with tempfile.TemporaryDirectory() as tmpdir:
        MEMO = Path(tmpdir) / "memo"
        if not args.cold_memo and not args.noop_only:
            prime_memo(quickstart_copy(Path(tmpdir) / "prime", args.tiny))
        for k in range(0 if args.noop_only else args.repeat):
            if args.cold_memo:
                MEMO = Path(tmpdir) / f"memo{k}"
            manifest = quickstart_copy(Path(tmpdir) / f"run{k}", args.tiny)
            wall, events = timed_apply(manifest)
            routes = built_routes(manifest)
            bare, bare_inside = timed_bare(manifest, routes, Path(tmpdir) / f"bare{k}", settle=True)
            plain, _ = timed_bare(manifest, routes, Path(tmpdir) / f"plain{k}", settle=False)
            plain_ratios.append(wall / plain)
            parts = breakdown(wall, events)
            measured = parts["trials: build"] + parts["trials: measure"] + parts["re-measurements (confirmation)"]
            ratios.append(wall / bare)
            confirm.append(parts["re-measurements (confirmation)"] / wall)
            outside.append(1.0 - measured / wall)
            slots = sum(int(e.get("slots") or 0) for e in events if e["event"] == "remeasure")
            print(f"\nrun {k + 1}: apply {wall:.2f} s ({len(routes)} trials, {slots} side-by-side turns), "
                  f"bare loop over the same routes and protocol {bare:.2f} s: {wall / bare:.2f}x (without the "
                  f"protocol's warm-up until settled {plain:.2f} s: {wall / plain:.2f}x); load "
                  f"{os.getloadavg()[0]:.2f}")
            print(f"  bare loop inside build+load+time: {bare_inside:.2f} s; apply's trials inside build+measure: "
                  f"{parts['trials: build'] + parts['trials: measure']:.2f} s")
            for name, secs in parts.items():
                print(f"  {name:<66} {secs:7.3f} s  {secs / wall:6.1%}")
    if args.aa_seeds:
        print(f"\nA/A wrong-winner rate, worst over landscapes and confirmed strategies: {aa_wrong(args.aa_seeds):.1%}")
    plan_s, apply_s, cli = noop_adaptive(args.tiny)
    from trt_routes.plan.settled import OFF_VAR
    print(f"\nno-op with adaptive ({'tiny' if args.tiny else '200 jobs'}), in one process: plan {plan_s:.3f} s, "
          f"apply {apply_s:.3f} s")
    print("as a user runs them (`trt-routes plan` and `trt-routes apply`, fresh processes, median of five):")
    for command in ("plan", "apply"):
        full = cli[command + " derived in full"]
        print(f"  {command:<6} {cli[command]:.3f} s; every plan derived in full ({OFF_VAR}=off) {full:.3f} s: "
              f"{full / cli[command]:.2f}x")
    secs, versions = onnx_import()
    print(f"import onnx ({versions}), fresh process, median of three: {secs:.3f} s")
    if args.noop_only:
        return
    print(f"apply/bare without settling: {statistics.median(plain_ratios):.2f}")
    # the no-op figures are the commands' wall times: what a user waits for (the in-process ones are above)
    print(f"apply/bare={statistics.median(ratios):.2f} confirm_share={statistics.median(confirm):.2f} "
          f"outside_measurement={statistics.median(outside):.2f} noop_plan_adaptive_s={cli['plan']:.2f} "
          f"noop_apply_adaptive_s={cli['apply']:.2f}")


if __name__ == "__main__":
    main()
